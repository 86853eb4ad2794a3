"""Reports must not change by accident: every fixture's CLI output against its snapshot.

Regenerate on purpose with `RLTRIAGE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_snapshots.py`
(see tests/snapshots/make_snapshots.py and CONTRIBUTING.md).
"""

from __future__ import annotations

import difflib
import os

import pytest

from .snapshots import make_snapshots


@pytest.fixture(scope="module")
def recorded() -> dict[str, str]:
    snapshots = make_snapshots.record()
    if os.environ.get("RLTRIAGE_UPDATE_SNAPSHOTS"):
        make_snapshots.write(snapshots)
    return snapshots


def test_every_fixture_has_snapshots(recorded: dict[str, str]) -> None:
    assert sorted(recorded) == sorted(make_snapshots.stored()), "snapshots added or missing: regenerate them"
    runs = make_snapshots.fixture_runs()
    assert len(runs) >= 100 and all(f"{run}/diagnose.json" in recorded for run in runs)


def test_reports_are_byte_identical_to_snapshots(recorded: dict[str, str]) -> None:
    stored = make_snapshots.stored()
    changed = [name for name in sorted(recorded) if stored.get(name) != recorded[name]]
    if changed:
        first = changed[0]
        diff = "".join(difflib.unified_diff(stored.get(first, "").splitlines(True), recorded[first].splitlines(True), first, "now", n=2))
        pytest.fail(f"{len(changed)} report(s) differ from their snapshots, first {first}:\n{diff[:4000]}")
