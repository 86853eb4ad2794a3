"""A one-line progress bar on stderr for scans and batches that take a while.

Drawn only on a terminal, only after the work has lasted `delay` seconds (short runs stay quiet),
and never when NO_COLOR is set or TERM=dumb: both mean "plain output please", and a bar rewritten
with carriage returns is noise in logs and CI. Only one bar is drawn per process at a time, so a
batch's bar is not fought over by the scan of each run it diagnoses.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TextIO, TypeVar

from ..inputs.discover import Source

_MB = 1 << 20
_active = 0  # bars drawing in this process
_silenced = False
_state_lock = threading.Lock()
_reading = threading.local()  # the bar of the scan this thread is reading for, if one is drawn

T = TypeVar("T")


def silence() -> None:
    """No bar from this process any more: for worker processes that share the parent's terminal."""
    global _silenced
    _silenced = True


def allowed(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if _silenced or "NO_COLOR" in env or env.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or stream-like objects without a terminal
        return False


def _mb(n: int) -> str:
    return f"{n / _MB:.1f}"


class Progress:
    """Bytes and files done (and runs, for a batch), with the rate; silent when not allowed."""

    def __init__(
        self,
        total_bytes: int | None = None,
        total_files: int | None = None,
        total_runs: int | None = None,
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
        delay: float = 1.0,
        interval: float = 0.1,
        width: int | None = None,
    ) -> None:
        global _active
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.total_runs = total_runs
        self.bytes = 0
        self.files = 0
        self.runs = 0
        self._clock = clock
        self._delay = delay
        self._interval = interval
        self._width = width
        self._started = clock()
        self._drawn_at: float | None = None
        self._shown = 0  # length of the line on screen, to blank it out on close
        self._lock = threading.Lock()
        with _state_lock:
            self.enabled = allowed(self.stream, env) and _active == 0
            if self.enabled:
                _active += 1
        self._closed = False

    def advance(self, bytes: int = 0, files: int = 0, runs: int = 0) -> None:  # noqa: A002 - reads as the unit
        if not self.enabled:
            return
        with self._lock:
            self.bytes += bytes
            self.files += files
            self.runs += runs
            now = self._clock()
            if now - self._started < self._delay:
                return
            if self._drawn_at is not None and now - self._drawn_at < self._interval:
                return
            self._drawn_at = now
            self._draw(self.line(now))

    def line(self, now: float | None = None) -> str:
        now = self._clock() if now is None else now
        elapsed = max(now - self._started, 1e-9)
        parts: list[str] = []
        if self.total_runs:
            parts.append(f"{self._bar(self.runs, self.total_runs)} {self.runs}/{self.total_runs} runs")
        elif self.total_bytes:
            parts.append(self._bar(self.bytes, self.total_bytes))
        parts.append(f"{_mb(self.bytes)}/{_mb(self.total_bytes)} MB" if self.total_bytes else f"{_mb(self.bytes)} MB")
        parts.append(f"{self.files}/{self.total_files} files" if self.total_files else f"{self.files} files")
        parts.append(f"{self.bytes / _MB / elapsed:.1f} MB/s")
        return "  ".join(parts)

    @staticmethod
    def _bar(done: int, total: int, cells: int = 20) -> str:
        share = min(max(done / total, 0.0), 1.0)
        filled = int(share * cells)
        return f"[{'#' * filled}{'.' * (cells - filled)}] {share * 100:3.0f}%"

    def _draw(self, text: str) -> None:
        width = self._width or shutil.get_terminal_size((80, 24)).columns
        text = text[: max(width - 1, 10)]  # a wrapped line cannot be rewritten by \r
        pad = " " * max(self._shown - len(text), 0)
        try:
            self.stream.write(f"\r{text}{pad}")
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False  # the terminal went away; the work goes on
            return
        self._shown = len(text)

    def close(self) -> None:
        """Blank the bar out, leaving the line for whatever is printed next."""
        global _active
        if self._closed:
            return
        self._closed = True
        if not self.enabled:
            return
        with _state_lock:
            _active -= 1
        if self._shown:
            try:
                self.stream.write("\r" + " " * self._shown + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def streamed(size: int) -> None:
    """`size` more bytes of the file being read: called by the reader as it streams, so that the
    bar of a scan moves within a large file, not only when a file is done."""
    hook = getattr(_reading, "hook", None)
    if hook is not None:
        hook(size)


def credits(sources: Sequence[Source]) -> list[int]:
    """On-disk bytes to count as done when each source has been read, in the given order.

    A plain file counts its size; the members of an archive count nothing until the last one,
    which counts the archive's (compressed) size: that is what the disk delivers, and members'
    sizes are unknown before they are read.
    """
    sizes = [0] * len(sources)
    last: dict[str, int] = {}
    for index, source in enumerate(sources):
        if source.order:
            last[source.order[0]] = index
            continue
        try:
            sizes[index] = os.stat(source.display).st_size
        except OSError:  # stdin, or gone since discovery
            pass
    for archive, index in last.items():
        try:
            sizes[index] += os.stat(archive).st_size
        except OSError:
            pass
    return sizes


def tracked(
    sources: Sequence[Source],
    results: Iterable[T],
    *,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    env: Mapping[str, str] | None = None,
) -> Iterator[T]:
    """`results` (one per source, in order) passed through, advancing a bar for the scan.

    Sources read in this thread (not in worker processes) also advance it as their bytes stream by
    (`streamed`), up to the file's size; the rest of its size is credited when its result comes."""
    progress = Progress(total_files=len(sources), stream=stream, clock=clock, env=env)
    previous = getattr(_reading, "hook", None)
    try:
        if not progress.enabled:
            yield from results
            return
        # Stat'ing every file costs time on huge folders: only done when a bar will be drawn.
        sizes = credits(sources)
        progress.total_bytes = sum(sizes)
        current = [0, 0]  # the source being read, and the bytes of it credited so far

        def on_bytes(size: int) -> None:
            room = (sizes[current[0]] if current[0] < len(sizes) else 0) - current[1]
            step = min(size, room)
            if step > 0:
                current[1] += step
                progress.advance(step)

        _reading.hook = on_bytes
        for index, item in enumerate(results):
            progress.advance(max((sizes[index] if index < len(sizes) else 0) - current[1], 0), 1)
            current[0], current[1] = index + 1, 0
            yield item
    finally:
        _reading.hook = previous
        progress.close()
