"""Read every input once: sniff it, skip what is binary or unreadable, parse configs and
environment reports, and stream logs through the scanner — in forked workers with `jobs > 1`."""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import BinaryIO, cast

from ..base.vocabulary import InputKind
from ..infer.fact import BaseFact
from ..inputs.discover import MAX_PARSED_FILE, SNIFF_BYTES, Source, Warning, classify, looks_binary
from ..kb.knowledge import KnowledgeBase
from ..kb.regexes import patterns_run
from .facts import config_file_facts, env_report_facts, numbered_lines
from .progress import streamed
from .scan import FileScan, Scanner, scanner_for

_worker_lock = threading.Lock()
_NVIDIA_SMI = re.compile(rb"NVIDIA-SMI |memory\.used \[MiB\]")


class _Rejoined(io.RawIOBase):
    """A stream that gives back the bytes already read for classification, then the rest."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:  # type: ignore[override]
        size = -1 if size is None else size
        if self._head:
            out, self._head = (self._head, b"") if size < 0 or size >= len(self._head) else (self._head[:size], self._head[size:])
        else:
            out = self._rest.read(size)
        streamed(len(out))
        return out


class _LineCounter(io.RawIOBase):
    """Counts the newlines of what is read through it; `rest` reads what is left, counting it."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.newlines = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:  # type: ignore[override]
        data = self._raw.read(-1 if size is None else size)
        self.newlines += data.count(b"\n")
        return data

    def rest(self) -> int:
        while self.read(1 << 20):
            pass
        return self.newlines


def read_source(source: Source, scanner: Scanner, warnings: list[Warning], threads: int = 1) -> tuple[FileScan | None, list[BaseFact]]:
    """Read one source; a log's chunks are classified in `threads` threads (Scanner.scan)."""
    # Within a diagnosis, slow patterns are counted across all its files; read alone, in this one.
    with patterns_run():
        return _read_source(source, scanner, warnings, threads)


def _read_source(source: Source, scanner: Scanner, warnings: list[Warning], threads: int) -> tuple[FileScan | None, list[BaseFact]]:
    try:
        stream = source.open()
    except OSError as exc:
        warnings.append(Warning(source.display, f"skipped: {exc.strerror or exc}"))
        return None, []
    with stream:
        try:
            head = stream.read(SNIFF_BYTES)
        except OSError as exc:
            warnings.append(Warning(source.display, f"skipped: {exc.strerror or exc}"))
            return None, []
        if not head:
            warnings.append(Warning(source.display, "empty file"))
            return FileScan(source.display, classify(source, head)), []
        if looks_binary(head):
            warnings.append(Warning(source.display, "skipped: binary content"))
            return None, []
        kind = classify(source, head)
        rejoined = _Rejoined(head, stream)
        facts: list[BaseFact] = []
        notes: list[str] = []
        try:
            if kind is InputKind.config:
                counting = _LineCounter(cast(BinaryIO, rejoined))
                facts = config_file_facts(source.display, cast(BinaryIO, counting), notes)
                scan = FileScan(source.display, kind, lines=counting.rest())
            elif kind is InputKind.env_report:
                # The whole report up to MAX_PARSED_FILE (16 MiB), not only the sniffed head.
                data = head + stream.read(MAX_PARSED_FILE)
                lines = list(numbered_lines(io.BytesIO(data), MAX_PARSED_FILE + len(head), notes))
                facts = env_report_facts(source.display, lines)
                if _NVIDIA_SMI.search(data[:SNIFF_BYTES]):
                    # nvidia-smi's table also holds what signatures read (memory in use per GPU).
                    scan = scanner.scan(source.display, kind, io.BytesIO(data))
                else:
                    scan = FileScan(source.display, kind, lines=len(lines))
            else:
                scan = scanner.scan(source.display, kind, rejoined, threads)
        except (OSError, EOFError, ValueError) as exc:
            warnings.append(Warning(source.display, f"read stopped early: {exc}"))
            return None, facts
        for note in [*notes, *scan.warnings]:
            warnings.append(Warning(source.display, note))
        return scan, facts


# What forked workers inherit instead of receiving it pickled (sources hold open functions).
_worker_state: tuple[KnowledgeBase, list[Source]] | None = None


def _read_in_worker(index: int) -> tuple[FileScan | None, list[BaseFact], list[Warning]]:
    assert _worker_state is not None
    kb, sources = _worker_state
    notes: list[Warning] = []
    scan, facts = read_source(sources[index], scanner_for(kb), notes)
    return scan, facts, notes


def _threads(jobs: int) -> int:
    """Threads for one log's chunks: as asked, but no more than the CPUs this process may use (more
    only hold more chunks in memory)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return max(1, min(jobs, usable))


def read_sources(
    sources: list[Source], kb: KnowledgeBase, scanner: Scanner, jobs: int
) -> Iterator[tuple[FileScan | None, list[BaseFact], list[Warning]]]:
    """Read every source, in order; with jobs > 1, in forked worker processes (the GIL would
    serialise threads), each inheriting the compiled knowledge base; or, for one source, in this
    process with `jobs` threads classifying its chunks (compiled code, without the GIL)."""
    if jobs <= 1 or len(sources) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for source in sources:
            notes: list[Warning] = []
            scan, facts = read_source(source, scanner, notes, _threads(jobs))
            yield scan, facts, notes
        return
    global _worker_state
    with _worker_lock:
        _worker_state = (kb, sources)
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            # Tasks of a few files: the workers finish nearly together (a last task of many files
            # leaves the others idle), and the round trips stay few.
            yield from pool.map(_read_in_worker, range(len(sources)), chunksize=max(1, len(sources) // (jobs * 32)))
        _worker_state = None
