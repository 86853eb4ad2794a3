"""The stage marker is defined once: the writer, the signature and the readers agree."""

from __future__ import annotations

import re

import rltriage
from rltriage.base.markers import BAR_COUNT, MARKER_SIGNATURE, STAGE_MARKER, STAGE_MARKER_PATTERN, format_marker, step_markers


def test_the_signature_is_the_marker_definition() -> None:
    sig = rltriage.load_knowledge_base().signatures[MARKER_SIGNATURE]
    assert sig.model.pattern == STAGE_MARKER_PATTERN


def test_what_the_integration_writes_the_signature_reads() -> None:
    line = format_marker("reward_computed", 0, 1.25, reward="math")
    assert line == "[rltriage] stage=reward_computed step=0 seconds=1.250 reward=math"
    match = STAGE_MARKER.search(f"2025-01-01 00:00:00 - INFO - {line}")
    assert match is not None and match["stage"] == "reward_computed" and match["step"] == "0" and match["seconds"] == "1.250"
    assert format_marker("trainer_started") == "[rltriage] stage=trainer_started"


def test_step_markers_are_the_completed_steps_only() -> None:
    text = "[rltriage] stage=reward_started step=1 [rltriage] stage=step_completed step=1 seconds=4.0"
    found = step_markers(text)
    assert [m["stage"] for m in found] == ["step_completed"] and found[0]["seconds"] == "4.0"
    assert step_markers("stage=step_completed step=1") == []


def test_bar_count() -> None:
    match = re.search(r"\|\s*" + BAR_COUNT, " 5%|▌         | 1/20 [00:42<13:18, 42.01s/it]")
    assert match is not None and (match["n"], match["m"]) == ("1", "20")
