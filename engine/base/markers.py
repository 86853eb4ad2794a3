"""Lines a run prints that rltriage reads as proof of progress: the stage marker, and the step
counter of a tqdm / Hugging Face progress bar. One definition each; the TRL integration writes the
marker, the `rltriage.stage_marker` signature, `watch` and `verify` read it."""

from __future__ import annotations

import re

MARKER_SIGNATURE = "rltriage.stage_marker"
# `[rltriage] stage=<stage>[ step=<n>][ seconds=<x>]`, extra `key=value` pairs after: the order is fixed.
STAGE_MARKER_PATTERN = r"\[rltriage\] stage=(?P<stage>[a-z_]+)(?: step=(?P<step>\d+))?(?: seconds=(?P<seconds>[\d.]+))?"
STAGE_MARKER = re.compile(STAGE_MARKER_PATTERN)
STEP_COMPLETED = ("step_completed", "first_step_completed")

# A bar's step counter, `N/M [` (`…| 3/20 [00:42<…`): what comes before it differs between readers.
BAR_COUNT = r"(?P<n>\d+)/(?P<m>\d+) \["


def format_marker(stage: str, step: int | None = None, seconds: float | None = None, **extra: object) -> str:
    parts = [f"[rltriage] stage={stage}"]
    if step is not None:
        parts.append(f"step={step}")
    if seconds is not None:
        parts.append(f"seconds={seconds:.3f}")
    parts.extend(f"{key}={value}" for key, value in extra.items())
    return " ".join(parts)


def step_markers(text: str) -> list[re.Match[str]]:
    """The markers of completed steps in a line (`stage=step_completed`, `stage=first_step_completed`)."""
    return [m for m in STAGE_MARKER.finditer(text) if m.group("stage") in STEP_COMPLETED]
