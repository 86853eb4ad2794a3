"""The one folder walker, and the three ways it is used: discovery, batch runs and watch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rltriage.inputs.discover import Warning, discover
from rltriage.inputs.walk import folders
from rltriage.tools.batch import find_runs
from rltriage.tools.watch import Watcher


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name in ("b.log", "a/z.log", "a/y/x.log", "a.log", "c/d.txt", ".hidden/h.log"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name + "\n")
    os.symlink(root / "c", root / "link_to_folder")
    os.symlink(root / "b.log", root / "link_to_file")
    return root


def test_depth_first_in_name_order_without_following_folder_links(tree: Path) -> None:
    seen = [(os.path.relpath(f.path, tree), [e.name for e in f.files]) for f in folders(str(tree))]
    assert seen == [
        (".", ["a.log", "b.log", "link_to_file", "link_to_folder"]),
        (".hidden", ["h.log"]),
        ("a", ["z.log"]),
        ("a/y", ["x.log"]),
        ("c", ["d.txt"]),
    ]


def test_pruning_and_errors(tree: Path) -> None:
    visited = []
    for folder in folders(str(tree)):
        visited.append(os.path.relpath(folder.path, tree))
        folder.subfolders[:] = [p for p in folder.subfolders if not p.endswith("/a")]
    assert "a" not in visited and "a/y" not in visited
    errors: list[tuple[str, bool]] = []
    assert list(folders(str(tree / "missing"), lambda path, exc, listing: errors.append((path, listing)))) == []
    assert errors == [(str(tree / "missing"), True)]


def test_discovery_reads_files_first_and_warns_about_folder_links(tree: Path) -> None:
    warnings: list[Warning] = []
    names = [os.path.relpath(s.display, tree) for s in discover([str(tree)], warnings)]
    assert names == ["a.log", "b.log", "link_to_file", ".hidden/h.log", "a/z.log", "a/y/x.log", "c/d.txt"]
    assert [w.message for w in warnings] == ["symbolic link to a folder not followed"]


def test_watch_lists_regular_files_in_path_order(tree: Path) -> None:
    listed = [os.path.relpath(path, tree) for path, _info in Watcher([str(tree)]).listing()]
    assert listed == [".hidden/h.log", "a/y/x.log", "a/z.log", "a.log", "b.log", "c/d.txt", "link_to_file"]


def test_batch_finds_runs_and_skips_hidden_folders(tree: Path) -> None:
    runs = [os.path.relpath(r.path, tree) for r in find_runs(str(tree))]
    assert runs == ["."]  # the root holds logs directly: it is one run with everything below it
    runs = [os.path.relpath(r.path, tree) for r in find_runs(str(tree / "a"))]
    assert runs == ["a"]
    (tree / "a.log").unlink()
    (tree / "b.log").unlink()
    runs = [os.path.relpath(r.path, tree) for r in find_runs(str(tree))]
    assert runs == ["a", "c"]  # .hidden is skipped; a holds logs, c holds a .txt log
