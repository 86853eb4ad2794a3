"""Stack dumps as evidence: py-spy dumps, faulthandler dumps and Python tracebacks.

The scanner notes where a dump starts; this module re-reads those blocks, splits them into thread
stacks, and turns them into facts: one `frame` fact per frame (matched by frame signatures, which
are ordinary signatures with `scope: frame`), and a `stack_outlier` fact naming the process whose
main-thread stack differs from what all the others are doing — with dumps of many ranks, the rank
that is not in the collective the others wait in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .lines import bounded_lines
from .normalize import segments

# py-spy: `Process 1234: python train.py`, `Thread 5678 (idle): "MainThread"`, `    func (file.py:12)`.
PYSPY_PROCESS = re.compile(r"^Process (?P<pid>\d+): ")
PYSPY_THREAD = re.compile(r"^Thread (?P<tid>0x[0-9a-fA-F]+|\d+) \((?P<state>[a-z+]+)\)(?:: \"(?P<name>[^\"]*)\")?")
PYSPY_FRAME = re.compile(r"^\s{2,}(?P<func>[^\s(][^()]*?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)\s*$")
# faulthandler: `Thread 0x… (most recent call first):`, `Current thread 0x…`, `Stack (most recent call first):`.
FAULT_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):|^Stack \(most recent call first\):")
FAULT_FRAME = re.compile(r'^\s{2}File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# A Python traceback, most recent call last.
TRACEBACK_START = re.compile(r"^Traceback \(most recent call last\):")
TRACEBACK_FRAME = re.compile(r'^\s{2}File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)

MAX_BLOCK_LINES = 4000  # one dump block; longer ones are cut
MAX_THREADS = 4096


@dataclass
class Frame:
    func: str
    file: str
    line: int | None
    log_line: int

    @property
    def text(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{self.func} ({where})"


@dataclass
class ThreadStack:
    """One thread's stack, innermost frame first."""

    path: str
    process: str
    thread: str
    main: bool
    kind: str  # pyspy | faulthandler | traceback
    header_line: int
    state: str | None = None
    frames: list[Frame] = field(default_factory=list)

    @property
    def signature(self) -> tuple[str, ...]:
        """What the thread is doing, independent of line numbers and paths: its function names."""
        return tuple(f"{f.func}@{f.file.rsplit('/', 1)[-1]}" for f in self.frames)


def _texts(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str, int | None]]:
    """Lines with launcher prefixes removed, and the rank those prefixes named."""
    for number, raw in lines:
        for segment in segments(raw):
            yield number, segment.text, segment.rank


def parse_block(path: str, lines: list[tuple[int, str]], default_process: str) -> list[ThreadStack]:
    """Thread stacks in one dump block (lines numbered as in the file)."""
    stacks: list[ThreadStack] = []
    current: ThreadStack | None = None
    process = default_process
    traceback_open = False
    for number, text, rank in _texts(lines):
        owner = f"rank{rank}" if rank is not None else process
        match = PYSPY_PROCESS.match(text)
        if match:
            process = f"pid{match.group('pid')}" if rank is None else owner
            current = None
            continue
        match = PYSPY_THREAD.match(text)
        if match:
            name = match.group("name") or ""
            current = ThreadStack(path, owner, match.group("tid"), name == "MainThread", "pyspy", number, match.group("state"))
            stacks.append(current)
            continue
        match = FAULT_THREAD.match(text)
        if match:
            tid = match.group("tid") or "stack"
            is_main = bool(match.group("current")) or tid == "stack" or (match.group("name") or "") == "MainThread"
            current = ThreadStack(path, owner, tid, is_main, "faulthandler", number)
            stacks.append(current)
            continue
        if TRACEBACK_START.match(text):
            current = ThreadStack(path, owner, "traceback", True, "traceback", number)
            stacks.append(current)
            traceback_open = True
            continue
        if current is None:
            continue
        frame_match = PYSPY_FRAME.match(text) if current.kind == "pyspy" else None
        if frame_match is None and current.kind == "faulthandler":
            frame_match = FAULT_FRAME.match(text)
        if frame_match is None and current.kind == "traceback":
            frame_match = TRACEBACK_FRAME.match(text)
        if frame_match is not None:
            line = frame_match.group("line")
            frame = Frame(frame_match.group("func"), frame_match.group("file"), int(line) if line else None, number)
            if current.kind == "traceback":
                current.frames.insert(0, frame)  # tracebacks list the innermost call last
            else:
                current.frames.append(frame)
        elif traceback_open and current.kind == "traceback" and text and not text.startswith(" "):
            traceback_open = False  # the exception line ends the traceback
            current = None
    return [s for s in stacks if s.frames][:MAX_THREADS]


def blocks(lines: list[tuple[int, str]], starts: list[int]) -> Iterator[list[tuple[int, str]]]:
    """The lines of each dump block: from a header to the next header, at most MAX_BLOCK_LINES."""
    by_number = {number: i for i, (number, _text) in enumerate(lines)}
    ordered = sorted(set(starts))
    for position, start in enumerate(ordered):
        index = by_number.get(start)
        if index is None:
            continue
        stop = index + MAX_BLOCK_LINES
        if position + 1 < len(ordered):
            # A py-spy process header and its first thread header belong to one block.
            following = by_number.get(ordered[position + 1])
            if following is not None and not PYSPY_PROCESS.match(lines[index][1]):
                stop = min(stop, following)
        yield lines[index:stop]


def process_of(path: str) -> str:
    match = RANK_IN_NAME.search(path.rsplit("/", 1)[-1])
    return f"rank{match.group(1)}" if match else path.rsplit("/", 1)[-1]


def read_blocks(stream: Iterable[bytes] | Any, starts: list[int], max_lines: int = 200_000, keep: int = 2000) -> list[tuple[int, str]]:
    """The numbered lines of a file that fall inside dump blocks, read in one pass; each line is
    cut to its first `keep` bytes."""
    windows = sorted(set(starts))
    kept: list[tuple[int, str]] = []
    position = 0
    for number, raw in enumerate(bounded_lines(stream, keep), start=1):
        while position < len(windows) and number >= windows[position] + MAX_BLOCK_LINES:
            position += 1
        if position >= len(windows) or len(kept) >= max_lines:
            break
        if number >= windows[position]:
            kept.append((number, raw.decode("utf-8", "replace").rstrip("\r\n")))
    return kept


def parse_dumps(path: str, numbered: list[tuple[int, str]], starts: list[int]) -> list[ThreadStack]:
    """Every thread stack in a file, given the lines of its dump blocks and where headers are."""
    seen: set[tuple[str, str, int]] = set()
    stacks: list[ThreadStack] = []
    default = process_of(path)
    for block in blocks(numbered, starts):
        for stack in parse_block(path, block, default):
            key = (stack.process, stack.thread, stack.header_line)
            if key not in seen:
                seen.add(key)
                stacks.append(stack)
    return stacks


@dataclass(frozen=True)
class Outlier:
    stack: ThreadStack
    majority: tuple[str, ...]
    majority_count: int
    total: int


def odd_one_out(stacks: list[ThreadStack]) -> Outlier | None:
    """With the main threads of three or more processes, the one process whose stack differs from a
    clear majority that all do the same thing."""
    main: dict[str, ThreadStack] = {}
    for stack in stacks:
        if stack.main and stack.kind != "traceback" and stack.process not in main:
            main[stack.process] = stack
    if len(main) < 3:
        return None
    groups = Counter(s.signature for s in main.values())
    (majority, count), *rest = groups.most_common()
    singles = [sig for sig, n in rest if n == 1]
    if count < 2 or count < len(main) - 1 or len(singles) != 1:
        return None
    odd = next(s for s in main.values() if s.signature == singles[0])
    return Outlier(odd, majority, count, len(main))
