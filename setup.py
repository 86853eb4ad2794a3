"""The parts of the build pyproject.toml cannot say: the subpackages of `engine/` under the import
name `rltriage`, and the knowledge base copied into the wheel as `rltriage/_kb/`.

The optional compiled module `rltriage.pipeline._linescan` is built where the Hyperscan library and
its headers are found (pkg-config's `libhs`, or hs.h in /usr/include/hs or /usr/local/include/hs:
Debian's and Ubuntu's `libhyperscan-dev`). Without them, or if it fails to compile, the install goes
on without it and the scanner does the same work in Python, more slowly. Where PCRE2 is found too
(`libpcre2-dev`), the module also confirms the hits of the few signatures Hyperscan cannot state (a
backreference, a lookahead) without calling Python.

An editable install (`pip install -e .`) skips the copy: `rltriage.kb.load.builtin_pack` then finds
no `_kb` beside the package and reads the checkout's own rules/, signatures/, collect/, templates/,
fixtures/ and schemas/, so an edit there is seen at once.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, find_packages, setup
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


def linescan() -> list[Extension]:
    """The compiled module, when the Hyperscan library is there to build it against."""
    found = _located("libhs", "hs.h", ("/usr/include/hs", "/usr/local/include/hs"))
    if found is None:
        print("rltriage: the Hyperscan library's headers were not found; building without the compiled scanner")
        return []
    include, library = found
    libraries, macros = ["hs"], []
    # PCRE2 confirms the hits of the signatures Hyperscan cannot state (a backreference, a lookahead).
    pcre2 = _located("libpcre2-8", "pcre2.h", ("/usr/include", "/usr/local/include"))
    if pcre2 is not None:
        include += pcre2[0]
        library += pcre2[1]
        libraries.append("pcre2-8")
        macros.append(("HAVE_PCRE2", "1"))
    return [
        Extension(
            "rltriage.pipeline._linescan",
            ["engine/pipeline/_linescan.c"],
            include_dirs=include,
            library_dirs=library,
            libraries=libraries,
            define_macros=macros,
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]


def _located(package: str, header: str, folders: tuple[str, ...]) -> tuple[list[str], list[str]] | None:
    """The include and library folders of a C library: pkg-config's, else the first of `folders`
    that holds its `header`; None when neither finds it."""
    try:
        found = subprocess.run(["pkg-config", "--cflags-only-I", "--libs-only-L", package], capture_output=True, text=True, check=False)
    except OSError:
        found = None
    if found is not None and found.returncode == 0:
        flags = found.stdout.split()
        return [flag[2:] for flag in flags if flag.startswith("-I")], [flag[2:] for flag in flags if flag.startswith("-L")]
    for folder in folders:
        if Path(folder, header).is_file():
            return [folder], []
    return None


setup(
    ext_modules=linescan(),
    packages=["rltriage", *(f"rltriage.{name}" for name in find_packages(str(HERE / "engine")))],
    cmdclass={"build_py": build_py_with_kb},
)
