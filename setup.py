"""The parts of the build pyproject.toml cannot say: the subpackages of `engine/` under the import
name `rltriage`, and the knowledge base copied into the wheel as `rltriage/_kb/`.

An editable install (`pip install -e .`) skips the copy: `rltriage.kb.load.builtin_pack` then finds
no `_kb` beside the package and reads the checkout's own rules/, signatures/, collect/, templates/,
fixtures/ and schemas/, so an edit there is seen at once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
KNOWLEDGE_BASE = ("rules", "signatures", "collect", "templates", "fixtures", "schemas")


class build_py_with_kb(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "rltriage" / "_kb"
        shutil.rmtree(target, ignore_errors=True)  # a stale build/ must not keep deleted rules
        for folder in KNOWLEDGE_BASE:
            shutil.copytree(HERE / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(
    packages=["rltriage", *(f"rltriage.{name}" for name in find_packages(str(HERE / "engine")))],
    cmdclass={"build_py": build_py_with_kb},
)
