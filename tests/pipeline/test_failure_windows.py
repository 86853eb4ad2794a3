"""The scanner keeps the lines around failure-looking lines for the failure parser: across chunk
boundaries, for tracebacks longer than the default window, and within a bounded memory."""

from __future__ import annotations

from pathlib import Path

import rltriage
from rltriage.pipeline.run import analyse
from rltriage.pipeline.scan import CHUNK, FAILURE_WINDOWS


def _traceback(frames: int, exception: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for i in range(frames):
        lines.append(f'  File "/work/rl/step_{i}.py", line {10 + i}, in call_{i}')
        lines.append(f"    return call_{i + 1}(batch)")
    lines.append(exception)
    return "\n".join(lines) + "\n"


def test_a_traceback_across_the_chunk_boundary_keeps_its_frames(tmp_path: Path) -> None:
    filler = "INFO step heartbeat ok\n"
    head = filler * ((CHUNK - 600) // len(filler))  # the traceback starts just before the first chunk ends
    log = tmp_path / "train.log"
    log.write_text(head + _traceback(30, "socket.gaierror: [Errno -2] Name or service not known") + filler * 10)
    diagnosis = rltriage.diagnose([log])
    (failure,) = diagnosis.failures
    assert failure.type == "gaierror"
    assert failure.frame is not None and failure.frame.endswith("in call_29")
    assert failure.line == head.count("\n") + 1 + 2 * 30 + 1


def test_a_long_traceback_is_read_from_its_header(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("INFO starting\n" + _traceback(80, "_queue.Empty") + "INFO shutting down\n")
    (failure,) = rltriage.diagnose([log]).failures
    assert failure.type == "Empty" and failure.frame is not None and "call_79" in failure.frame


def test_many_failures_keep_the_first_and_the_last(tmp_path: Path) -> None:
    blocks = [f"ValueError: bad sample {i}\nINFO next\n" + "INFO filler\n" * 300 for i in range(sum(FAILURE_WINDOWS) + 50)]
    log = tmp_path / "train.log"
    log.write_text("".join(blocks) + "RuntimeError: the end\n")
    (scan,) = analyse([str(log)]).scans
    messages = [f.message for f in scan.failures]
    assert messages[0] == "bad sample 0" and messages[-1] == "the end"
    assert len(messages) < len(blocks), "windows in the middle of a long log are let go"
