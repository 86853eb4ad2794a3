"""CONTRIBUTING's five-minute path, run the way a contributor runs it: a fresh copy of the
repository, an editable install into a new virtual environment, then `rules new`, `rules lint`,
`rules test` and `diagnose` from inside the checkout, as subprocesses.

The editable install (`pip install -e`) is the real one: pip builds it with the project's own build
backend. Only the dependencies are borrowed from the environment running the tests (linked into the
new environment without this environment's own copy of rltriage), so the test needs no download
beyond the build backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from .test_contributor_workflow import EXPECT, LOG, QUIET_EXPECT, QUIET_LOG, RULE, SIGNATURE, TEMPLATE

REPO = Path(__file__).resolve().parent.parent
ID = "mylab.checkpoint_disk_full"


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


def _fresh_clone(target: Path) -> Path:
    """What `git clone` gives: the tracked files (with their working-tree contents), nothing built."""
    for name in _tracked_files():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target / name)
    return target


def _environment(folder: Path) -> Path:
    """A new virtual environment that sees this environment's dependencies but not its rltriage."""
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    deps = folder / "borrowed"
    deps.mkdir()
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        name = entry.name.lower()
        if name.startswith(("rltriage", "__editable__", "_distutils_hack", "pip", "setuptools")) or name.endswith(".pth"):
            continue
        (deps / entry.name).symlink_to(entry)
    (site / "borrowed.pth").write_text(str(deps) + "\n")
    return python


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs a git checkout to copy")
def test_five_minute_path_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = _fresh_clone(tmp_path / "checkout")
    python = _environment(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-e", "."], cwd=clone, capture_output=True, text=True, env=env
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = subprocess.run([python, "-c", "import rltriage; print(rltriage.__file__)"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert Path(where.stdout.strip()) == clone / "engine" / "__init__.py", where.stdout + where.stderr
    cli = tmp_path / "venv" / "bin" / "rltriage"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(cli), *args], cwd=clone, capture_output=True, text=True, env=env, timeout=600)

    new = run("rules", "new", "--bucket", "cluster_infra", "--id", ID)
    assert new.returncode == 0, new.stderr
    assert (clone / "rules/mylab/checkpoint_disk_full.yaml").is_file()

    # The untouched scaffold is what lint reads: the checkout's files, not a copy elsewhere.
    lint = run("rules", "lint", "--verbose")
    assert lint.returncode == 1, lint.stdout + lint.stderr
    assert "rules/mylab/checkpoint_disk_full.yaml" in lint.stdout and "error[placeholder]" in lint.stdout
    assert "rltriage: knowledge base: . (checkout)" in lint.stderr
    # Naming the checkout as a pack does not load it twice.
    again = run("rules", "lint", "--rules-dir", ".")
    assert "duplicate" not in again.stdout
    assert again.stdout.count("\n") == lint.stdout.count("\n")

    for name, text in {
        "signatures/mylab/checkpoint_disk_full.yaml": SIGNATURE,
        "rules/mylab/checkpoint_disk_full.yaml": RULE,
        "templates/fixes/mylab/checkpoint_disk_full.md.j2": TEMPLATE,
        "fixtures/mylab/checkpoint_disk_full/run.log": LOG,
        "fixtures/mylab/checkpoint_disk_full/expect.yaml": EXPECT,
        "fixtures/mylab/checkpoint_disk_full_quiet/run.log": QUIET_LOG,
        "fixtures/mylab/checkpoint_disk_full_quiet/expect.yaml": QUIET_EXPECT,
    }.items():
        (clone / name).write_text(text)

    lint = run("rules", "lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    tested = run("rules", "test", ID)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert f"pass  signature {ID}" in tested.stdout
    diagnosed = run("diagnose", "--format", "json", "fixtures/mylab/checkpoint_disk_full")
    assert diagnosed.returncode == 0, diagnosed.stderr
    report = json.loads(diagnosed.stdout)
    assert report["causes"][0]["rule"] == ID
    assert report["tool"]["knowledge_base"] == [{"path": ".", "origin": "checkout"}]
    # From outside the checkout, the same install still reads the checkout it was installed from.
    outside = subprocess.run([str(cli), "diagnose", "--verbose", str(clone / "fixtures/mylab/checkpoint_disk_full")], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert outside.returncode == 0, outside.stderr
    assert "rltriage: knowledge base: checkout (checkout)" in outside.stderr
    assert "is full" in outside.stdout
