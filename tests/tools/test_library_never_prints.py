"""The library halves of batch and watch report through return values and callbacks, never stdout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rltriage.tools.batch import run_batch
from rltriage.tools.watch import watch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def test_batch_returns_its_summary_and_hands_lines_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    shutil.copytree(FIXTURES / "trl" / "reward_never_returned", root / "one")
    (root / "one" / "expect.yaml").unlink()
    lines: list[str] = []
    notices: list[str] = []
    summary = run_batch(str(root), write_line=lines.append, notice=notices.append)
    assert summary.startswith("rltriage batch: 1 runs, 1 diagnosed, 0 errors")
    assert len(lines) == 1 and '"primary_bucket":"reward_blocking"' in lines[0]
    (tmp_path / "empty").mkdir()
    assert run_batch(str(tmp_path / "empty"), notice=notices.append).startswith("rltriage batch: 0 runs")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert notices == [f"warning: {tmp_path / 'empty'}: no runs found"]


def test_watch_reports_through_its_status_callback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text("loading\n")
    now = [0.0]
    messages: list[str] = []
    outcome = watch(
        [str(log)],
        stall_after=5,
        poll=1,
        on_stall=None,
        on_stall_timeout=1,
        rules_dirs=(),
        status=messages.append,
        clock=lambda: now[0],
        sleep=lambda seconds: now.__setitem__(0, now[0] + seconds),
    )
    assert outcome.stalled and outcome.analysis is not None
    assert messages[0].startswith("watching 1 file(s)") and messages[-1].startswith("STALLED — no progress for 5 s")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
