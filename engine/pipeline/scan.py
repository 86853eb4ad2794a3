"""Stage 2 — scan: stream every input in chunks and match the signatures.

The full path: all literals of all signatures form one prefilter that runs over whole chunks of
bytes; only lines that contain a literal are decoded, normalised and matched with the signature's
exact `regex` pattern. Per signature and file the scanner keeps a count, the first and last hit and
a few samples, so memory does not grow with the size of the log.

The aggregated path, for large inputs: a compiled matcher (pipeline/matcher.py) decides for a whole
chunk which signatures each line matches, and the hits of lines that only count are aggregated
without Python touching them: a count, the ranks, and where the last one is, made into a record
when the chunk is done. Lines whose records are still wanted (the first and the samples), lines
with anything else on them (failure words, config keys, stack headers, text the matcher's
translation is not sound for) and lines of untranslated signatures take the full path, so the
tallies, echoes, failures and warnings are the full path's. `Scanner(aggregate=False)` (or
RLTRIAGE_SCAN=reference) keeps every line on the full path; the equivalence tests compare the two.
"""

from __future__ import annotations

import gc
import os
import re
import threading
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from ..base.values import convert
from ..base.vocabulary import InputKind, ValueType
from ..infer.fact import PackedFields
from ..inputs.failures import ParsedFailure, parse_failures
from ..inputs.normalize import segments, strip_prefixes, timestamp
from ..kb.knowledge import CompiledSignature, KnowledgeBase
from ..kb.regexes import REGEX_TIMEOUT, timed_out
from .matcher import CONFIG, REDRAWN, SLOW, TRIGGER, Classified, LineMatcher, build_matcher, native_available
from .redact import CONTEXT, CUT_MARGIN, continued, cut_bytes, mask_key_blocks, redact
from .redact import cut as cut_text

CHUNK = 1 << 20
AHEAD = 4  # chunks classified ahead per thread (Scanner.scan with threads): keeps each thread busy
MAX_LINE = 1 << 20  # longer lines are matched in pieces of this size
MAX_TEXT = 2000  # evidence text is cut to this many characters
SAMPLES = 3
MAX_DEFERRED = 1 << 14  # bytes of a tally's last line kept until the file is done; longer ones are resolved at once
MAX_DISTINCT = 64  # separate tallies a signature may keep per file for its `distinct` groups
AGGREGATE_AFTER = 4 << 20  # bytes of a file read before the aggregated path takes over (auto mode)
MAX_CONFIG = 10_000  # config echoes kept per file
MAX_RANKS = 4096  # distinct ranks kept per tally


# Keys the report and the smoke-test reduction quote even when no rule matches on them.
WELL_KNOWN_CONFIG_KEYS = (
    "num_generations",
    "max_completion_length",
    "max_prompt_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "steps_per_generation",
    "num_processes",
    "max_steps",
    "num_train_epochs",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "gpu_memory_utilization",
    "max_model_len",
    "max_tokens",
    "reward_funcs",
    "eval_strategy",
    "model_name_or_path",
    "model",
    "tensor_parallel_size",
    "micro_batch_per_replica",
    "batch_per_replica",
    "group_size",
    "n",
)


class ByteStream(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(slots=True)
class HitRecord:
    """One matched line. Values and the timestamp are worked out only for the records a tally
    keeps (first, samples, last), when the file is done: most hits are counted and dropped."""

    line: int
    text: str
    rank: int | None
    match: Any = field(default=None, repr=False, compare=False)
    sig: Any = field(default=None, repr=False, compare=False)
    values: Mapping[str, Any] = field(default_factory=dict)
    timestamp: float | None = None

    def resolve(self) -> None:
        if self.sig is not None:
            if self.match is not None:
                self.values = extract(self.sig, self.match)
            self.timestamp = timestamp(self.text)
            self.match = self.sig = None  # nothing unpicklable or large stays behind


@dataclass(slots=True)
class Tally:
    signature: str
    count: int = 0
    first: HitRecord | None = None
    last: HitRecord | None = None
    samples: list[HitRecord] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    # The aggregated path's last hit, not yet made into a record: the end of its line in the chunk.
    pending: int | None = field(default=None, repr=False, compare=False)
    # Then, once its chunk is done: its line's number and bytes, made into `last` when the file is
    # done (a later chunk's last hit replaces it, so a signature's regex runs once a file, not once
    # a chunk).
    deferred: tuple[int, bytes] | None = field(default=None, repr=False, compare=False)

    def add(self, record: HitRecord, repeat: int) -> None:
        self.count += repeat
        if self.first is None:
            self.first = record
        elif len(self.samples) < SAMPLES:
            self.samples.append(record)
        self.last = record
        self.pending = self.deferred = None
        if record.rank is not None and len(self.ranks) < MAX_RANKS:
            self.ranks.add(record.rank)


@dataclass(slots=True)
class ConfigEcho:
    key: str
    value: str
    line: int
    text: str


@dataclass(slots=True)
class Unexplained:
    template: str
    count: int
    line: int
    text: str


@dataclass(slots=True)
class FileScan:
    path: str
    kind: InputKind
    lines: int = 0
    last_timestamp: float | None = None
    tallies: dict[str, Tally] = field(default_factory=dict)
    config: list[ConfigEcho] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unexplained: dict[str, Unexplained] = field(default_factory=dict)
    stack_headers: list[int] = field(default_factory=list)
    failures: list[ParsedFailure] = field(default_factory=list)


_NOTHING: Any = MappingProxyType({})
_NO_ITEMS: Any = ()
_NO_RANKS: Any = frozenset()


class OneTally(Mapping[str, Tally]):
    """The tallies of a file with hits of one signature only, read-only: what most small logs have
    (an NCCL `Init COMPLETE` line, one progress bar), kept in 48 bytes where a dict of one entry
    takes 184. Reads as the dict it replaces."""

    __slots__ = ("_key", "_tally")

    def __init__(self, key: str, tally: Tally) -> None:
        self._key = key
        self._tally = tally

    def __getitem__(self, key: str) -> Tally:
        if key == self._key:
            return self._tally
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield self._key

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return repr({self._key: self._tally})

    def __reduce__(self) -> tuple[type[OneTally], tuple[str, Tally]]:
        return (OneTally, (self._key, self._tally))


def compact(scan: FileScan) -> FileScan:
    """The scan with its empty containers replaced by shared read-only ones (a scan is not changed
    once it is done): what a folder of 100,000 small logs keeps per file is then little more than
    its path."""
    for name in ("tallies", "unexplained"):
        if not getattr(scan, name):
            setattr(scan, name, _NOTHING)
    if len(scan.tallies) == 1 and type(scan.tallies) is dict:
        ((key, tally),) = scan.tallies.items()
        scan.tallies = OneTally(key, tally)  # type: ignore[assignment]
    for name in ("config", "warnings", "stack_headers", "failures"):
        if not getattr(scan, name):
            setattr(scan, name, ())
    for tally in scan.tallies.values():
        if not tally.samples:
            tally.samples = _NO_ITEMS
        if not tally.ranks:
            tally.ranks = _NO_RANKS
        for record in (tally.first, *tally.samples, tally.last):
            if record is not None and type(record.values) is dict:
                # Read-only from here on: records without values share one empty mapping, the others' are packed.
                record.values = PackedFields(record.values) if record.values else _NOTHING
    return scan


# Lines that look like failures. Matched only on lines the prefilter already picked up through the
# failure words below, so the cost is per candidate line.
FAILURE_WORDS = (b"ERROR", b"FATAL", b"Exception", b"Error", b"failed", b"Failed")
# What ends a process without an exception line: signals and exit codes as shells, launchers and
# schedulers print them, C++ terminations and fatal interpreter errors.
FATAL_WORDS = (
    b"Killed", b"Segmentation fault", b"Aborted", b"Bus error", b"Illegal instruction", b"Floating point exception",
    b"exitcode", b"exit code", b"exit status", b"Exited with", b"terminate called", b"received at time=",
    b"received by PID", b"Caught signal", b"Exit", b"Interrupt", b"Fault", b"TimeoutExpired", b"TooLarge", b"zsh: ",
    b"exits with return code",
)
# A line that may end a failure record: an exception line, a C++ termination, a fatal signal or an
# exit code. Cheap and loose on purpose: it only decides which lines are kept with their context for
# the failure parser (inputs/failures.py), which knows the exact shapes.
FAILURE_TRIGGER = re.compile(
    r"(?:Error|Exception|Exit|Interrupt|Fault|Failure|TimeoutExpired|TooLarge|Unavailable|NotFound)\w*(?:\([\w.]+\))?(?:[:：]|\s*$)"
    r"|terminate called|Fatal Python error|exitcode|exit (?:code|status)|Exited with|exits with return code|Killed|Segmentation fault|Aborted"
    r"|Bus error|Illegal instruction|Floating point exception|received at time=|received by PID|Caught signal|zsh: "
)
# Words without which FAILURE_TRIGGER cannot match: lines without one need no trigger check.
TRIGGER_WORDS = (
    "Error", "Exception", "Exit", "Interrupt", "Fault", "Failure", "TimeoutExpired", "TooLarge", "Unavailable", "NotFound",
    "terminate called", "Fatal Python error", "exitcode", "exit code", "exit status", "Exited with", "exits with return code", "Killed", "Segmentation fault",
    "Aborted", "Bus error", "Illegal instruction", "Floating point exception", "received at time=", "received by PID", "Caught signal", "zsh: ",
)
# A traceback's header keeps the lines after it, up to its exception line, whatever that is named
# (`socket.gaierror: …`, `_queue.Empty` carry none of the words above).
TRACEBACK_HEADER = "Traceback (most recent call last)"
# A chained exception's header opens a traceback too: a paste that starts there, or is cut before
# its exception line, is still read as one.
CHAIN_HEADERS = ("During handling of the above exception", "The above exception was the direct cause")
TRACEBACK_OPENERS = (TRACEBACK_HEADER, *CHAIN_HEADERS)
TRACEBACK_AFTER = 200
FAILURE_BEFORE = 120  # lines kept before a failure line: the traceback that leads to it
FAILURE_AFTER = 20  # and after it: continuation lines, `what():`, torchelastic's failure table
FAILURE_BYTES = 64 * 1024  # at most this much text is looked back over
FAILURE_TEXT = 1000  # context lines are cut to this many characters
FAILURE_WINDOWS = (32, 96)  # windows kept from the start and from the end of a file
FAILURE_LINE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|\b\w*(?:Error|Exception)\b(?=:|\(|\s*$)|\b[Ff]ailed\b")
# A py-spy dump is often pasted without its `Process …` / `Python v…` lines: its thread lines open it too.
STACK_HEADERS = (b"most recent call first)", b"Traceback (most recent call last)", b"Python v", b" (idle)", b" (active")
# What else the full path looks for on a line: FAILURE_LINE's words, stack headers, Ray's repeat suffix.
CHAIN_HEADER_WORDS = tuple(header.encode() for header in CHAIN_HEADERS)
FULL_PATH_WORDS = (*FAILURE_WORDS, *FATAL_WORDS, *STACK_HEADERS, *CHAIN_HEADER_WORDS, b"CRITICAL", b"[repeated ")
STACK_HEADER_LINE = re.compile(
    r"(?:Thread 0x[0-9a-fA-F]+|Current thread 0x[0-9a-fA-F]+|Stack) \(most recent call first\):|Traceback \(most recent call last\):|^Python v\d"
    r"|^Thread (?:0x[0-9a-fA-F]+|\d+) \((?:idle|active(?:\+gil)?|gil|unknown)\)(?=:|\s*$)"
)
MAX_UNEXPLAINED = 300
MAX_STACK_HEADERS = 400
_MASKS = (
    (re.compile(r"^\[?(?:\d{4}-\d{2}-\d{2}[ T][\d:.,]+|[IWEF]\d{4} [\d:.]+|(?:DEBUG|INFO|WARNING|ERROR) \d{2}-\d{2} [\d:]+)\]?\s*(?:-\s+)?"), ""),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b"), "<id>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+)+/?"), "<path>"),
    (re.compile(r"\brank\s*\d+|\[rank\d+\]", re.IGNORECASE), "rank <n>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


def failure_template(text: str) -> str:
    """The line with what varies between occurrences (times, numbers, ids, paths, ranks) masked.
    Secrets go first: masking digits and paths would leave them in shapes redaction cannot see."""
    template = redact(cut_text(text, 4096)).strip()
    for pattern, replacement in _MASKS:
        template = pattern.sub(replacement, template)
    return template[:200]


class FailureWindows:
    """The lines around failure-looking lines, gathered while a file streams by.

    Windows from the start of the file and the most recent ones are kept (a process's own failure is
    usually the last thing it prints), so memory stays bounded whatever the file's size.
    """

    def __init__(self) -> None:
        self.first: list[list[tuple[int, str]]] = []
        self.last: deque[list[tuple[int, str]]] = deque(maxlen=FAILURE_WINDOWS[1])
        self.covered = 0  # the last line number any window holds
        self.pending = 0  # lines still wanted after the previous chunk's last window
        self.previous: list[tuple[int, bytes]] = []  # the previous chunk's last lines
        # (line number, text before it) when a long line was split and this chunk continues it
        self.split: tuple[int, str] | None = None

    def add(self, chunk: bytes, start: int, end: int, number: int, wanted: int = FAILURE_AFTER) -> None:
        """Keep the window around chunk[start:end], which is line `number` (1-based), with `wanted`
        lines after it."""
        low = max(0, start - FAILURE_BYTES)
        before = chunk[low:start].split(b"\n")[:-1]
        if low > 0:
            before = before[1:]  # the first piece starts mid-line
        numbered = [(number - len(before) + i, raw) for i, raw in enumerate(before)]
        if low == 0:
            numbered = self.previous + numbered
        stop = min(len(chunk), end + 1 + FAILURE_BYTES * max(1, wanted // FAILURE_AFTER))
        after = chunk[end + 1 : stop].split(b"\n") if end + 1 < stop else []
        if stop < len(chunk) or (after and not after[-1]):
            after = after[:-1]  # cut mid-line, or the empty piece after the chunk's last newline
        after = after[:wanted]
        if stop == len(chunk):  # the window runs on into the next chunk
            self.pending = max(self.pending, wanted - len(after))
        lines = [*numbered[-FAILURE_BEFORE:], (number, chunk[start:end]), *((number + 1 + i, raw) for i, raw in enumerate(after))]
        window = [(n, self._text(n, raw, MAX_TEXT if n == number else FAILURE_TEXT)) for n, raw in lines if n > self.covered]
        if window:
            self._keep(window)

    def _keep(self, window: list[tuple[int, str]]) -> None:
        self.covered = window[-1][0]
        latest = self.last[-1] if self.last else (self.first[-1] if self.first else None)
        if latest is not None and window[0][0] <= latest[-1][0] + 1:
            latest.extend(window)  # contiguous with the previous window: one record
        elif len(self.first) < FAILURE_WINDOWS[0]:
            self.first.append(window)
        else:
            self.last.append(window)

    def chunk_start(self, chunk: bytes, base_line: int) -> None:
        """Give a window cut short by the previous chunk's end the lines that follow it."""
        if self.pending and self.covered == base_line:
            head = chunk.split(b"\n", self.pending)[: self.pending]
            self._keep([(base_line + 1 + i, self._text(base_line + 1 + i, raw, FAILURE_TEXT)) for i, raw in enumerate(head)])
        self.pending = 0

    def _text(self, number: int, raw: bytes, limit: int) -> str:
        if self.split is not None and number == self.split[0]:
            return cut_text(continued(self.split[1], raw[: limit + 2 * CUT_MARGIN].decode("utf-8", "replace")), limit)
        return cut_bytes(raw, limit)

    def chunk_done(self, chunk: bytes, last_line: int) -> None:
        """Remember the chunk's last lines (the last is line `last_line`) for a window that starts at
        the top of the next chunk."""
        tail = chunk[-FAILURE_BYTES:].split(b"\n")
        if chunk.endswith(b"\n"):
            tail = tail[:-1]
        if len(chunk) > FAILURE_BYTES:
            tail = tail[1:]
        tail = tail[-FAILURE_BEFORE:]
        self.previous = [(last_line - len(tail) + 1 + i, raw) for i, raw in enumerate(tail)]

    def lines(self) -> list[tuple[int, str]]:
        merged: dict[int, str] = {}
        for window in [*self.first, *self.last]:
            for number, text in window:
                merged.setdefault(number, text)
        return mask_key_blocks(sorted(merged.items()))  # a key's body lines are secrets one by one


_CONFIG_VALUE = r"""['"]?\s*(?P<sep>=|:|\s)\s*['"]?(?P<value>\[[^\]]{0,400}\]|[^\s,)'"}\]]+)"""
# After a bare key and a space (no `--`, `=` or `:`), only a value that cannot be a word of prose: in
# "Increase gpu_memory_utilization or tensor_parallel_size to provide …" neither key is set to anything.
_SPACED_VALUE = re.compile(r"[-+]?\.?\d[\w.+-]*|(?i:true|false|none|null)|(?:torch\.)?(?:b?float\d+|half|bf16|fp16|fp32)")


class Scanner:
    """Compiled once per knowledge base (and set of config keys); safe to share between threads."""

    def __init__(self, kb: KnowledgeBase, config_keys: Iterable[str] = (), aggregate: bool | None = None) -> None:
        """`aggregate`: True takes the aggregated path from a file's first byte, False never, None
        (the default) once a file has streamed AGGREGATE_AFTER bytes."""
        self.aggregate = aggregate
        self._matcher: LineMatcher | None = None
        self._matcher_built = False
        self._cache_looked = False
        self._matcher_lock = threading.Lock()
        self.signatures: list[CompiledSignature] = [s for s in kb.signatures.values() if s.model.scope == "line"]
        self._by_id = {s.id: s for s in self.signatures}
        self._plain: dict[Any, frozenset[int]] = {}
        self.unfiltered = [s for s in self.signatures if not s.literals]
        literals: dict[tuple[str, bool], list[CompiledSignature]] = {}
        for sig in self.signatures:
            for literal in sig.literals or ():
                literals.setdefault((literal.lower() if sig.ignore_case else literal, sig.ignore_case), []).append(sig)
        # Only distinctive key names are looked for in logs: `n` or `model` would make every line a
        # candidate. A short last part keeps its parent (`optimizer.name`); config files are parsed whole.
        keys: set[str] = set()
        for key in config_keys:
            parts = [p for p in key.split(".") if p]
            if not parts:
                continue
            if "_" in parts[-1] and len(parts[-1]) >= 6:
                keys.add(parts[-1])
            elif len(parts) >= 2 and len(".".join(parts[-2:])) >= 8:
                keys.add(".".join(parts[-2:]))
        self.config_keys = sorted(keys)
        self.config_re = (
            re.compile(r"(?<![\w.])-{0,2}(?P<key>(?:[A-Za-z_][\w]*\.)*(?:" + "|".join(map(re.escape, self.config_keys)) + r"))(?![\w.])" + _CONFIG_VALUE)
            if self.config_keys
            else None
        )
        pieces: list[tuple[bytes, bool, str | None]] = [
            (literal.encode("utf-8"), ignore_case, literal) for literal, ignore_case in sorted(literals, key=lambda key: (-len(key[0]), key))
        ]
        pieces += [(key.encode(), False, None) for key in self.config_keys]
        pieces += [(word, False, None) for word in (*FAILURE_WORDS, *FATAL_WORDS, *STACK_HEADERS, *CHAIN_HEADER_WORDS)]
        self.prefilter = make_prefilter(pieces) if pieces else None
        # Which signatures a candidate line can match: every literal found in it. Hyperscan reports
        # every occurrence of every literal; the regex alternation reports one literal per position
        # (the longest) and resumes after it, so for it a found literal also stands for the literals
        # it contains, and those that start inside it and run past its end are checked directly.
        every_occurrence = isinstance(self.prefilter, HyperscanPrefilter)
        by_text: dict[str, dict[str, CompiledSignature]] = {}
        for (literal, ignore_case), own in literals.items():
            # With every occurrence reported, a literal stands for itself only (no pass over all pairs).
            for (other, other_ci), other_sigs in [((literal, ignore_case), own)] if every_occurrence else literals.items():
                inside = other in literal.lower() if other_ci else other in literal
                if inside:
                    for sig in other_sigs:
                        by_text.setdefault(literal, {})[sig.id] = sig
        self.by_text = {text: sorted(found.values(), key=lambda s: s.id) for text, found in by_text.items()}
        self.overlapping: dict[str, list[tuple[str, bool]]] = {}
        for literal, _ci in [] if every_occurrence else literals:
            text = literal.lower()
            for other, other_ci in literals:
                other_text = other.lower()
                if other_text in text:
                    continue
                if any(other_text.startswith(text[i:]) for i in range(1, len(text))):
                    self.overlapping.setdefault(literal, []).append((other, other_ci))

    def scan(self, display: str, kind: InputKind, stream: ByteStream, threads: int = 1) -> FileScan:
        """Scan one file. With `threads` > 1, the compiled module classifies the chunks ahead of the
        one being settled, in that many threads (it lets go of the GIL); the chunks are still settled
        in order, so the result is the same."""
        result = FileScan(display, kind)
        windows = FailureWindows()
        line_no = 0  # number of newlines consumed before the current buffer
        carry = b""
        tail = b""
        long_line_warned = False
        streamed = 0
        matcher = self.matcher() if self.aggregate else None
        split = ""  # the end of the previous piece when a long line was split there
        read_split = False  # the same, where the chunks are read: whether the last one read ended mid-line
        ahead: deque[tuple[bytes, bool, LineMatcher | None, Future[Classified | None] | None]] = deque()
        pool: ThreadPoolExecutor | None = None

        def settle(chunk: bytes, too_long: bool, aggregated: LineMatcher | None, classified: Future[Classified | None] | None) -> None:
            nonlocal line_no, split, tail, long_line_warned
            if too_long and not long_line_warned:
                result.warnings.append(f"line {line_no + 1} is longer than {MAX_LINE // (1 << 20)} MiB; matched in pieces")
                long_line_warned = True
            windows.split = (line_no + 1, split) if split else None
            windows.chunk_start(chunk, line_no)
            if aggregated is not None:
                line_no += self._aggregate_chunk(aggregated, chunk, line_no, kind, result, windows, classified.result() if classified else None)
            else:  # a piece that continues a split line takes the full path, which joins it to its start
                line_no += self._scan_chunk(chunk, line_no, kind, result, windows, split)
            windows.chunk_done(chunk, line_no if chunk.endswith(b"\n") else line_no + 1)
            split = "" if chunk.endswith(b"\n") else chunk[-CONTEXT:].decode("utf-8", "replace")
            tail = chunk[-65536:] if len(chunk) >= 65536 else (tail + chunk)[-65536:]

        try:
            while True:
                block = stream.read(CHUNK)
                if not block:
                    break
                streamed += len(block)
                if matcher is None and self.aggregate is None:
                    if streamed >= AGGREGATE_AFTER:
                        matcher = self.matcher()
                    elif len(block) >= CHUNK:
                        matcher = self._ready_matcher()  # a file of a chunk or more: from its start if that is free
                buffer = carry + block
                cut = buffer.rfind(b"\n") + 1
                too_long = cut == 0 and len(buffer) > MAX_LINE
                if too_long:
                    cut = len(buffer)  # a line longer than MAX_LINE: match what we have, keep going
                chunk, carry = buffer[:cut], buffer[cut:]
                if not chunk:
                    continue
                aggregated = matcher if not read_split else None
                read_split = not chunk.endswith(b"\n")
                classified = None
                if threads > 1 and aggregated is not None and aggregated.native is not None:
                    if pool is None:
                        pool = ThreadPoolExecutor(threads, thread_name_prefix="rltriage-scan")
                    # With the tallies as they are now: a tally that keeps no more records stays so,
                    # and a hit of one that still might is handed back, so settling later is safe.
                    flags = self._native_flags(aggregated, kind, result.tallies)
                    classified = pool.submit(aggregated.classify, chunk, flags, len(result.config) >= MAX_CONFIG, True)
                ahead.append((chunk, too_long, aggregated, classified))
                while len(ahead) > (AHEAD * threads if pool is not None else 0):
                    settle(*ahead.popleft())
            while ahead:
                settle(*ahead.popleft())
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
        if carry:
            windows.split = (line_no + 1, split) if split else None
            windows.chunk_start(carry, line_no)
            if matcher is not None and not split:
                self._aggregate_chunk(matcher, carry, line_no, kind, result, windows)
            else:
                self._scan_chunk(carry, line_no, kind, result, windows, split)
            line_no += 1
            tail = (tail + carry)[-65536:]
        result.lines = line_no
        result.last_timestamp = _last_timestamp(tail)
        result.failures = parse_failures(windows.lines(), end=line_no)
        for tally in result.tallies.values():
            tally.pending = None
            if tally.deferred is not None:
                self._resolve_deferred(tally)
            for record in (tally.first, *tally.samples, tally.last):
                if record is not None:
                    record.resolve()
        return result

    def _scan_chunk(self, chunk: bytes, base_line: int, kind: InputKind, result: FileScan, windows: FailureWindows, split: str = "") -> int:
        """Match the chunk's candidate lines; returns the chunk's number of newlines (each byte is
        counted once). `split` is the end of the previous piece when the chunk continues a split line."""
        if self.prefilter is None and not self.unfiltered:
            return chunk.count(b"\n")
        counted_to, line_no = 0, base_line
        if self.unfiltered or self.prefilter is None:
            lines: Iterable[tuple[int, int, list[str]]] = _every_line(self.prefilter, chunk)
        else:
            lines = self.prefilter.lines(chunk)
        for start, end, found in lines:
            line_no += chunk.count(b"\n", counted_to, start)
            counted_to = start
            raw = chunk[start:end]
            line = raw.decode("utf-8", "replace")
            if start == 0 and split:
                line = continued(split, line)  # no half secret from the piece before
            self._match_line(line, line_no + 1, kind, result, self._signatures_for(found, line))
            if FAILURE_TRIGGER.search(line):
                windows.add(chunk, start, end, line_no + 1)
            elif _opens_traceback(line):
                windows.add(chunk, start, end, line_no + 1, TRACEBACK_AFTER)
        return line_no - base_line + chunk.count(b"\n", counted_to)

    def matcher(self) -> LineMatcher | None:
        """The aggregated path's compiled matcher, built (or loaded from the disk cache) on first use;
        None without Hyperscan, or when a signature without literals makes every line a candidate."""
        with self._matcher_lock:
            if not self._matcher_built:
                self._matcher_built = True
                if isinstance(self.prefilter, HyperscanPrefilter) and not self.unfiltered:
                    self._matcher = build_matcher(self.signatures, self.config_keys, FULL_PATH_WORDS, TRIGGER_WORDS)
            return self._matcher

    def _ready_matcher(self) -> LineMatcher | None:
        """The matcher when it costs nothing to have: already built, or in the disk cache (loading
        takes milliseconds, compiling seconds). Looked for once."""
        with self._matcher_lock:
            if not self._matcher_built and not self._cache_looked:
                self._cache_looked = True
                if isinstance(self.prefilter, HyperscanPrefilter) and not self.unfiltered:
                    found = build_matcher(self.signatures, self.config_keys, FULL_PATH_WORDS, TRIGGER_WORDS, cached_only=True)
                    if found is not None:
                        self._matcher, self._matcher_built = found, True
            return self._matcher

    def _aggregate_chunk(
        self,
        matcher: LineMatcher,
        chunk: bytes,
        base_line: int,
        kind: InputKind,
        result: FileScan,
        windows: FailureWindows,
        classified: Classified | None = None,
    ) -> int:
        """The aggregated path over one chunk; returns the chunk's number of newlines.

        1. The matcher reports, at the end of each line, the signatures and markers on it. With the
           compiled module (LineMatcher.classify), the lines that are only counted are settled
           there, and only the others come back here.
        2. Lines with a launcher prefix or carriage-return redraws are cut into what the full path
           matches (the text after the prefix, each kept redraw); the pieces of the whole chunk are
           matched in one more scan. (The compiled module cuts the lines it can before its scan.)
        3. In line order: lines with anything but signature hits, and hits whose tally still wants
           records, take the full path; the others are counted, and the last hit of each signature
           is made into its record when the chunk is done.
        """
        size = len(chunk)
        if classified is None:  # else classified ahead, in a thread (Scanner.scan)
            classified = matcher.classify(chunk, self._native_flags(matcher, kind, result.tallies), len(result.config) >= MAX_CONFIG)
        counted: list[tuple[int, int, int]] = []
        lines: Iterable[tuple[int, list[int]]]
        newlines_in_chunk: int | None = None
        if classified is not None:
            lines, counted, deferred, newlines_in_chunk = classified  # the lines settled in compiled code are only counted there
            if deferred:
                lines, counted = self._classify_deferred(matcher, chunk, lines, counted, deferred, kind, result)
        else:
            lines = self._lines_hit(matcher, chunk)
        roles = matcher.roles
        plain = self._plain_ids(matcher, kind)
        pieces: list[bytes] = []
        work: list[tuple[int, int, Any]] = []  # (line end, what to do, with what), in line order
        rfind = chunk.rfind
        countable, widened = self._countable(matcher, kind)
        unconfirmed: dict[int, list[tuple[int, bytes]]] = {}  # widened hits on countable lines, by work item
        special: list[int] = []  # the work items with hits of their own (_HITS, _PIECES): few of all lines
        for current, ids in lines:
            start = rfind(b"\n", 0, current) + 1
            first = chunk[start] if start < size else 10  # _may_have_prefix(chunk, start), inlined: once per line
            prefixed = first in _PREFIX_FIRST or (48 <= first <= 57 and _STAMP_START.match(chunk, start) is not None)
            if not prefixed and plain.issuperset(ids):
                work.append((current, _COUNT, ids))  # the common line: exact signature hits, nothing else
            elif not prefixed and countable.issuperset(ids):
                work.append((current, _COUNT, ids))  # the same, with hits to confirm first
                raw = chunk[start:current]
                for index in ids:
                    if index in widened:
                        unconfirmed.setdefault(index, []).append((len(work) - 1, raw))
            else:
                self._sort_line(chunk, start, current, ids, prefixed, roles, result, work, pieces, special)
        for index, waiting_lines in unconfirmed.items():
            verdicts = matcher.verify(index, [raw for _item, raw in waiting_lines])
            for number, (item, raw) in enumerate(waiting_lines):
                end, what, line_ids = work[item]
                if what != _COUNT:
                    continue
                if verdicts is not None:
                    confirmed = verdicts[number]
                else:
                    try:
                        confirmed = matcher.signatures[index].regex.search(raw.decode("utf-8"), timeout=REGEX_TIMEOUT) is not None
                    except TimeoutError:
                        work[item] = (end, _FULL, False)  # the full path gives up on it and says so
                        continue
                if not confirmed:
                    line_ids.remove(index)
        on_piece: list[list[int]] = [[] for _ in pieces]
        if pieces:
            self._match_pieces(matcher, pieces, on_piece)
        for number in special:
            end, what, data = work[number]
            if what == _PIECES:
                raw, cut = data
                work[number] = (end, _HITS, (raw, [(index, rank, text) for piece, rank, text in cut for index in on_piece[piece]]))
        self._confirm(matcher, work, special)
        # The literals on the lines that take the full path, found in one scan.
        literals_on = self._literals_on([chunk[chunk.rfind(b"\n", 0, end) + 1 : end] for end, what, _data in work if what == _FULL])
        tallies = result.tallies
        pending: dict[str, Tally] = {}
        state = [0, base_line]  # where newlines were counted to, and the line number there
        names = matcher.names
        full = 0
        # Signature ids whose tally keeps no more records (its samples are full, and stay so): a line
        # with only those is counted as it stands.
        saturated: dict[int, Tally] = {}
        simple = self._simple_ids(matcher, kind)
        for end, what, data in work:
            if what == _COUNT:
                if not data:
                    continue  # its only hits were not confirmed
                if saturated.keys() >= set(data) or self._saturate(data, tallies, names, saturated):
                    for index in data:
                        tally = saturated[index]
                        tally.count += 1
                        tally.pending = end
                        pending[tally.signature] = tally
                else:
                    self._full_line(chunk, end, False, state, kind, result, windows)
            elif what == _FULL:
                self._full_line(chunk, end, data, state, kind, result, windows, literals_on[full])
                full += 1
            elif not self._count_hits(matcher, end, data[0], data[1], kind, result, pending, saturated, simple):
                self._full_line(chunk, end, False, state, kind, result, windows)
        for index, count, last in counted:
            # Hits counted in compiled code: their tallies kept no more records when the chunk began.
            tally = tallies[names[index]]
            tally.count += count
            if tally.pending is not None:
                tally.pending = max(tally.pending, last)
            elif tally.last is None or tally.last.line <= base_line or tally.last.line < base_line + chunk.count(b"\n", 0, last) + 1:
                tally.pending = last  # unless the full path kept a record of a later line in this chunk
            pending[tally.signature] = tally
        # The last hits, made into records in line order.
        waiting = sorted((t for t in pending.values() if t.pending is not None), key=lambda t: t.pending or 0)
        starts = [rfind(b"\n", 0, tally.pending or 0) + 1 for tally in waiting]
        if newlines_in_chunk is None:  # counting the chunk's newlines once, from its start
            before: list[int] = []
            counted_to = newlines = 0
            for start in starts:
                newlines += chunk.count(b"\n", counted_to, start)
                counted_to = start
                before.append(newlines)
            newlines_in_chunk = newlines + chunk.count(b"\n", counted_to)
        else:  # the compiled module counted them: count back from the end, which the last hits are near
            before = []
            counted_from, after = size, 0
            for start in reversed(starts):
                after += chunk.count(b"\n", start, counted_from)
                counted_from = start
                before.append(newlines_in_chunk - after)
            before.reverse()
        for tally, start, newlines in zip(waiting, starts, before, strict=True):
            self._resolve_pending(chunk, start, base_line + newlines + 1, tally)
        return newlines_in_chunk

    def _classify_deferred(
        self,
        matcher: LineMatcher,
        chunk: bytes,
        lines: list[tuple[int, list[int]]],
        counted: list[tuple[int, int, int]],
        deferred: list[int],
        kind: InputKind,
        result: FileScan,
    ) -> tuple[list[tuple[int, list[int]]], list[tuple[int, int, int]]]:
        """The lines a thread's classify deferred (a hit needs its signature's own pattern, a Python
        call), classified again here, where the call may be made: on their own, one after the other,
        and what comes back put where the lines are in the chunk. A line is classified by what is on
        it alone, so the answer is the one a single call over the chunk gives."""
        starts = [chunk.rfind(b"\n", 0, end) + 1 for end in deferred]
        offsets: list[int] = []  # where each line starts in `text`
        at = 0
        for start, end in zip(starts, deferred, strict=True):
            offsets.append(at)
            at += end - start + 1
        text = b"\n".join(chunk[start:end] for start, end in zip(starts, deferred, strict=True))
        again = matcher.classify(text, self._native_flags(matcher, kind, result.tallies), len(result.config) >= MAX_CONFIG)
        assert again is not None  # the first call was made with the same module
        handed, more, _none, _newlines = again

        def in_chunk(end: int) -> int:
            line = bisect_right(offsets, end) - 1
            return starts[line] + end - offsets[line]

        lines = sorted([*lines, *((in_chunk(end), ids) for end, ids in handed)], key=lambda line: line[0])
        return lines, [*counted, *((index, count, in_chunk(last)) for index, count, last in more)]

    @staticmethod
    def _lines_hit(matcher: LineMatcher, chunk: bytes) -> Iterator[tuple[int, list[int]]]:
        """The chunk's lines with hits, in order: the end of each, and the ids the matcher reported on
        it, sorted, each once."""
        hits: list[int] = []
        append = hits.append
        find = chunk.find
        size = len(chunk)

        def on_match(index: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            # Reported where the match ends (a literal marker, or a signature's translation, which
            # does not run on to the line's end), wanted at the line's end.
            end = find(b"\n", end)
            append((size if end < 0 else end) << 11 | index)

        matcher.scan(chunk, on_match)
        hits.sort()
        hits.append(-1)  # ends the last line
        current = -1
        ids: list[int] = []
        for hit in hits:
            end = hit >> 11
            if end == current:
                if not ids or hit & 2047 != ids[-1]:  # a signature may match a line more than once
                    ids.append(hit & 2047)
                continue
            if current >= 0:
                yield current, ids
            current = end
            ids = [hit & 2047]

    def _native_flags(self, matcher: LineMatcher, kind: InputKind, tallies: Mapping[str, Tally]) -> bytes:
        """The NATIVE_* bits of every id for `LineMatcher.classify`, with the tallies as they are now."""
        if matcher.native is None:
            return b""
        key = (id(matcher), kind, "native")
        base: Any = self._plain.get(key)
        if base is None:
            simple = self._simple_ids(matcher, kind)
            flags = bytearray(len(matcher.roles))
            for index, sig in enumerate(matcher.signatures):
                flags[index] = (
                    (NATIVE_SIMPLE if index in simple else 0)
                    | (NATIVE_EXACT if matcher.exact[index] else 0)
                    | (NATIVE_ANCHORED if matcher.anchored[index] else 0)
                    | (NATIVE_KINDSKIP if sig.model.kinds and kind not in sig.model.kinds else 0)
                )
            base = self._plain[key] = (bytes(flags), tuple(sorted(simple)))  # type: ignore[assignment]
        flags_of_kind, simple_ids = base
        out = bytearray(flags_of_kind)
        names = matcher.names
        for index in simple_ids:
            tally = tallies.get(names[index])
            if tally is not None and len(tally.samples) >= SAMPLES:
                out[index] |= NATIVE_SATURATED
        return bytes(out)

    @staticmethod
    def _saturate(data: list[int], tallies: dict[str, Tally], names: tuple[str, ...], saturated: dict[int, Tally]) -> bool:
        """Whether every tally of these ids keeps no more records; those that do not are noted."""
        every = True
        for index in data:
            if index in saturated:
                continue
            tally = tallies.get(names[index])
            if tally is not None and len(tally.samples) >= SAMPLES:
                saturated[index] = tally
            else:
                every = False
        return every

    def _sort_line(
        self,
        chunk: bytes,
        start: int,
        end: int,
        ids: list[int],
        prefixed: bool,
        roles: tuple[int, ...],
        result: FileScan,
        work: list[tuple[int, int, Any]],
        pieces: list[bytes],
        special: list[int],
    ) -> None:
        """What the aggregated path does with a line that is not a plain count (`special` gets the
        position of the work item when it is one with hits: _HITS or _PIECES)."""
        marks = 0
        found: list[int] = []
        for index in ids:
            role = roles[index]
            if role:
                marks |= role
            elif index not in found:
                found.append(index)
        if marks & SLOW or (marks & CONFIG and len(result.config) < MAX_CONFIG):
            work.append((end, _FULL, bool(marks & TRIGGER)))
            return
        raw = chunk[start:end]
        if marks & REDRAWN:
            parts = _kept_redraws(raw)
            if parts is None:
                work.append((end, _FULL, False))
                return
        elif prefixed and found:
            parts = [raw]
        else:
            if found:
                special.append(len(work))
                work.append((end, _HITS, (raw, [(index, None, raw) for index in found])))
            return
        cut: list[tuple[int, int | None, bytes]] = []
        for part in parts:
            text, rank = _after_prefix(part)
            cut.append((len(pieces), rank, text))
            pieces.append(text)
        special.append(len(work))
        work.append((end, _PIECES, (raw, cut)))

    def _confirm(self, matcher: LineMatcher, work: list[tuple[int, int, Any]], special: list[int]) -> None:
        """Drop the hits their signature's pattern does not confirm: widened translations, and texts
        that start like a prefix a translation's `^` lets through. A line where a pattern gives up
        (timeout) takes the full path. `special`: the positions of the work items with hits."""
        wanted: dict[int, list[tuple[int, int, bytes]]] = {}
        for number in special:
            _end, what, data = work[number]
            if what != _HITS:
                continue
            for position, (index, _rank, text) in enumerate(data[1]):
                if not matcher.exact[index] or (matcher.anchored[index] and _may_have_prefix(text)):
                    wanted.setdefault(index, []).append((number, position, text))
        if not wanted:
            return
        rejected: set[tuple[int, int]] = set()
        gave_up: set[int] = set()
        for index, items in wanted.items():
            sig = matcher.signatures[index]
            by_database = [item for item in items if matcher.exact[index] or not _may_have_prefix(item[2])]
            verdicts = matcher.verify(index, [text for _n, _p, text in by_database]) if by_database and not matcher.exact[index] else None
            if verdicts is None:
                by_database = []
            for (number, position, _text), verdict in zip(by_database, verdicts or (), strict=False):
                if not verdict:
                    rejected.add((number, position))
            done = {(number, position) for number, position, _text in by_database}
            for number, position, text in items:
                if (number, position) in done:
                    continue
                try:
                    if sig.regex.search(text.decode("utf-8"), timeout=REGEX_TIMEOUT) is None:
                        rejected.add((number, position))
                except TimeoutError:
                    gave_up.add(number)
        for number in {n for n, _p in rejected} | gave_up:
            end, _what, (raw, hits) = work[number]
            if number in gave_up:
                work[number] = (end, _FULL, False)
            else:
                work[number] = (end, _HITS, (raw, [hit for position, hit in enumerate(hits) if (number, position) not in rejected]))

    def _literals_on(self, lines: list[bytes]) -> list[list[str] | None]:
        """For each line, the prefilter's literals on it (None: none at all), in one scan."""
        out: list[list[str] | None] = [None] * len(lines)
        if not lines or self.prefilter is None:
            return out
        starts: dict[int, int] = {}
        offset = 0
        for number, line in enumerate(lines):
            starts[offset] = number
            offset += len(line) + 1
        for start, _end, found in self.prefilter.lines(b"\n".join(lines)):
            out[starts[start]] = found
        return out

    def _plain_ids(self, matcher: LineMatcher, kind: InputKind) -> frozenset[int]:
        """Signature ids whose hit on an ordinary line is a hit as it stands, for files of this kind."""
        key = (id(matcher), kind)
        found = self._plain.get(key)
        if found is None:
            found = self._plain[key] = frozenset(
                index
                for index, sig in enumerate(matcher.signatures)
                if matcher.exact[index] and not matcher.gated[index] and not sig.model.distinct and not (sig.model.kinds and kind not in sig.model.kinds)
            )
        return found

    def _simple_ids(self, matcher: LineMatcher, kind: InputKind) -> frozenset[int]:
        """Signature ids whose confirmed hit in a file of this kind counts without more checks."""
        key = (id(matcher), kind, "simple")
        found = self._plain.get(key)
        if found is None:
            found = self._plain[key] = frozenset(
                index
                for index, sig in enumerate(matcher.signatures)
                if not matcher.gated[index] and not sig.model.distinct and not (sig.model.kinds and kind not in sig.model.kinds)
            )
        return found

    def _countable(self, matcher: LineMatcher, kind: InputKind) -> tuple[frozenset[int], frozenset[int]]:
        """Signature ids a plain line may be counted with (after confirming the widened ones)."""
        key = (id(matcher), kind, "countable")
        found = self._plain.get(key)
        if found is None:
            widened = frozenset(
                index
                for index, sig in enumerate(matcher.signatures)
                if matcher.widened[index] and not matcher.gated[index] and not sig.model.distinct and not (sig.model.kinds and kind not in sig.model.kinds)
            )
            found = self._plain[key] = self._plain_ids(matcher, kind) | widened
            self._plain[(id(matcher), kind, "widened")] = widened
        return found, self._plain[(id(matcher), kind, "widened")]

    def _match_pieces(self, matcher: LineMatcher, pieces: list[bytes], on_piece: list[list[int]]) -> None:
        """Match the pieces of lines (texts after prefixes, redraws) in one scan; fills `on_piece`."""
        ends: list[int] = []
        offset = -1
        for piece in pieces:
            offset += len(piece) + 1
            ends.append(offset)  # where each piece's newline is (or the buffer ends)
        count = len(matcher.signatures)
        found: list[int] = []
        record = found.append

        def on_match(index: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            if index < count:
                record(end << 11 | index)

        matcher.scan(b"\n".join(pieces), on_match)
        for hit in found:
            number = bisect_left(ends, hit >> 11)
            index = hit & 2047
            if index not in on_piece[number]:
                on_piece[number].append(index)

    def _count_hits(
        self,
        matcher: LineMatcher,
        end: int,
        raw: bytes,
        hits: list[tuple[int, int | None, bytes]],
        kind: InputKind,
        result: FileScan,
        pending: dict[str, Tally],
        saturated: dict[int, Tally],
        simple: frozenset[int],
    ) -> bool:
        """Count a line's (confirmed) hits; False when the line must take the full path instead."""
        kept: list[tuple[Tally, int | None]] = []
        for index, rank, _text in hits:
            if index in saturated and index in simple:
                kept.append((saturated[index], rank))
                continue
            sig = matcher.signatures[index]
            if sig.model.kinds and kind not in sig.model.kinds:
                continue
            if matcher.gated[index] and not self._holds_literal(sig, raw):
                continue
            tally = result.tallies.get(sig.id)
            if sig.model.distinct or tally is None or len(tally.samples) < SAMPLES:
                return False  # its tally depends on the values, or still wants records
            saturated[index] = tally
            kept.append((tally, rank))
        for tally, rank in kept:
            tally.count += 1
            if rank is not None and len(tally.ranks) < MAX_RANKS:
                tally.ranks.add(rank)
            tally.pending = end
            pending[tally.signature] = tally
        return True

    @staticmethod
    def _holds_literal(sig: CompiledSignature, raw: bytes) -> bool:
        haystack = raw.lower() if sig.ignore_case else raw
        return any((literal.lower() if sig.ignore_case else literal).encode("utf-8") in haystack for literal in sig.literals or ())

    def _full_line(
        self,
        chunk: bytes,
        end: int,
        trigger: bool,
        state: list[int],
        kind: InputKind,
        result: FileScan,
        windows: FailureWindows,
        found: list[str] | None | bool = True,
    ) -> None:
        """One line on the full path, exactly as `_scan_chunk` treats a candidate line. `found`: the
        prefilter's literals on it (None: none), True to look them up here."""
        start = chunk.rfind(b"\n", 0, end) + 1
        state[1] += chunk.count(b"\n", state[0], start)
        state[0] = start
        raw = chunk[start:end]
        if found is True:
            found = self._literals_on([raw])[0]
        if found is None or found is False:
            return  # no literal: the full path never looks at this line
        line = raw.decode("utf-8", "replace")
        self._match_line(line, state[1] + 1, kind, result, self._signatures_for(found, line))
        if trigger and FAILURE_TRIGGER.search(line):
            windows.add(chunk, start, end, state[1] + 1)
        elif _opens_traceback(line):
            windows.add(chunk, start, end, state[1] + 1, TRACEBACK_AFTER)

    def _resolve_pending(self, chunk: bytes, start: int, line_no: int, tally: Tally) -> None:
        """Keep the aggregated last hit of a tally (on line `line_no`, from `start`) for the end of
        the file; a line too long to keep is made into its record now."""
        end = tally.pending
        assert end is not None
        tally.pending = None
        tally.deferred = (line_no, chunk[start:end])
        if end - start > MAX_DEFERRED:
            self._resolve_deferred(tally)

    def _resolve_deferred(self, tally: Tally) -> None:
        """Make the aggregated last hit of a tally into the record the full path would have kept."""
        assert tally.deferred is not None
        line_no, raw = tally.deferred
        tally.deferred = None
        sig = self._by_id[tally.signature]
        for segment in reversed(segments(raw.decode("utf-8", "replace"))):
            try:
                match = sig.regex.search(segment.text, timeout=REGEX_TIMEOUT)
            except TimeoutError:
                continue
            if match is not None:
                tally.last = HitRecord(line_no, cut_text(segment.raw, MAX_TEXT), segment.rank, match, sig)
                return
        raise AssertionError(f"the aggregated path counted a hit of {sig.id} that its pattern does not match on line {line_no}")

    def _signatures_for(self, found: list[str], line: str) -> list[CompiledSignature]:
        """The signatures whose literals the prefilter found on a line (plus those with no literal)."""
        chosen: dict[str, CompiledSignature] = {sig.id: sig for sig in self.unfiltered}
        for text in found:
            key = text if text in self.by_text else text.lower()
            for sig in self.by_text.get(key, ()):
                chosen[sig.id] = sig
            for other, ignore_case in self.overlapping.get(key, ()):
                if other in (line.lower() if ignore_case else line):
                    for sig in self.by_text.get(other, ()):
                        chosen[sig.id] = sig
        return sorted(chosen.values(), key=lambda s: s.id)

    def _match_line(self, line: str, line_no: int, kind: InputKind, result: FileScan, candidates: list[CompiledSignature]) -> None:
        for segment in segments(line):
            explained = False
            for sig in candidates:
                if sig.model.kinds and kind not in sig.model.kinds:
                    continue
                try:
                    match = sig.regex.search(segment.text, timeout=REGEX_TIMEOUT)
                except TimeoutError:
                    if timed_out(sig.regex):  # once per run; it matches nothing from now on
                        result.warnings.append(f"line {line_no}: signature {sig.id} gave up after {REGEX_TIMEOUT}s; disabled for the rest of the run")
                    continue
                if match is None:
                    continue
                explained = True
                record = HitRecord(line_no, cut_text(segment.raw, MAX_TEXT), segment.rank, match, sig)
                key = sig.id
                if sig.model.distinct:
                    values = extract(sig, match)
                    key = sig.id + "\x00" + "\x00".join(str(values.get(name)) for name in sig.model.distinct)
                    if key not in result.tallies and sum(1 for t in result.tallies.values() if t.signature == sig.id) >= MAX_DISTINCT:
                        key = sig.id + "\x00…"
                result.tallies.setdefault(key, Tally(sig.id)).add(record, segment.repeat)
            if STACK_HEADER_LINE.search(segment.text):
                if len(result.stack_headers) < MAX_STACK_HEADERS:
                    result.stack_headers.append(line_no)
            elif not explained and FAILURE_LINE.search(segment.text):
                template = failure_template(segment.text)
                known = result.unexplained.get(template)
                if known is not None:
                    known.count += segment.repeat
                elif len(result.unexplained) < MAX_UNEXPLAINED:
                    result.unexplained[template] = Unexplained(template, segment.repeat, line_no, cut_text(segment.raw, MAX_TEXT))
            if self.config_re is not None:
                for match in self.config_re.finditer(segment.text):
                    if match.group("sep").isspace() and match.start("key") == match.start() and not _SPACED_VALUE.fullmatch(match.group("value")):
                        continue
                    if len(result.config) < 10_000:
                        result.config.append(ConfigEcho(match.group("key").lstrip("-"), match.group("value"), line_no, cut_text(segment.raw, MAX_TEXT)))


_COUNT, _FULL, _HITS, _PIECES = range(4)  # what the aggregated path does with a line
# What `_linescan.classify` is told of each id, one byte each (the F_* bits of _linescan.c).
NATIVE_SIMPLE = 1  # a confirmed hit counts without more checks (see _simple_ids)
NATIVE_SATURATED = 2  # its tally keeps no more records
NATIVE_EXACT = 4
NATIVE_ANCHORED = 8
NATIVE_KINDSKIP = 16  # the signature does not apply to this kind of file
_PREFIX_STARTS = (b"(", b"[", b">")
_PREFIX_FIRST = frozenset(b"([>")  # the same, as byte values
_STAMP_START = re.compile(rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T")  # the start of a collector's stamp, checked cheaply


def _opens_traceback(line: str) -> bool:
    return any(header in line for header in TRACEBACK_OPENERS)


def _may_have_prefix(data: bytes, start: int = 0) -> bool:
    """Whether the text at `start` may begin with a prefix strip_prefixes takes off (a launcher's
    bracket or parenthesis, a collector's stamp, a Markdown quote); a cheap over-approximation."""
    first = data[start : start + 1]
    return first in _PREFIX_STARTS or (first.isdigit() and _STAMP_START.match(data, start) is not None)


def _is_redraw(part: bytes) -> bool:
    return b"%|" in part and (b"it/s" in part or b"s/it" in part or b"?it" in part)


def _kept_redraws(raw: bytes) -> list[bytes] | None:
    """The pieces of a line with carriage returns that `normalize.segments` keeps (None: none)."""
    parts = [p for p in raw.split(b"\r") if p.strip()]
    if not parts:
        return None
    if len(parts) > 4:
        parts = [parts[0], *(p for p in parts[1:-2] if not _is_redraw(p)), *parts[-2:]]
    return parts


# Ray's prefix with a pid (inputs/normalize.RAY_PREFIX, on the ASCII text the matcher passes), the
# most common prefix by far: when the text after it cannot start another prefix, it is all that
# strip_prefixes takes off, and it names no rank.
_RAY_PID_PREFIX = re.compile(rb"\((?:[A-Za-z_][\w.:<>\-]*)?,? ?pid=[0-9]+(?:, ip=[0-9a-fA-F.:]+)?(?: \+[0-9hms.]+)?\)[ \t\n\r\x0b\x0c]?")


def _after_prefix(part: bytes) -> tuple[bytes, int | None]:
    """The text a launcher prefix leaves (the very object when there is none), and the rank it names."""
    if not _may_have_prefix(part):
        return part, None
    ray = _RAY_PID_PREFIX.match(part)
    if ray is not None and not _may_have_prefix(part, ray.end()):
        return part[ray.end() :], None
    line = part.decode("utf-8")
    text, rank, _actor = strip_prefixes(line)
    if len(text) == len(line):
        return part, None
    return part[len(line) - len(text) :], rank  # prefixes are ASCII on lines the matcher passes


class RegexPrefilter:
    """One alternation of every literal, longest first, searched over whole chunks: RE2 when
    installed (a linear-time DFA), Python's `re` otherwise."""

    def __init__(self, pieces: list[tuple[bytes, bool, str | None]]) -> None:
        alternation = b"|".join(b"(?i:" + re.escape(raw) + b")" if ci else re.escape(raw) for raw, ci, _key in pieces)
        try:
            import re2  # type: ignore[import-not-found]

            self.pattern: Any = re2.compile(alternation)
        except Exception:  # noqa: BLE001 - missing or unusable binding: the slow path is still correct
            self.pattern = re.compile(alternation)

    def lines(self, chunk: bytes) -> Iterator[tuple[int, int, list[str]]]:
        size = len(chunk)
        match = self.pattern.search(chunk, 0)
        while match is not None:
            line_start = chunk.rfind(b"\n", 0, match.start()) + 1
            line_end = chunk.find(b"\n", match.end())
            if line_end < 0:
                line_end = size
            found: list[str] = []
            while match is not None and match.start() < line_end:
                found.append(match.group(0).decode("utf-8", "replace"))
                match = self.pattern.search(chunk, max(match.end(), match.start() + 1))
            yield line_start, line_end, found


class HyperscanPrefilter:
    """The same literals in a Hyperscan database: several GB/s, one callback per occurrence."""

    def __init__(self, pieces: list[tuple[bytes, bool, str | None]]) -> None:
        import hyperscan  # type: ignore[import-not-found]

        self.keys = [key if key is not None else "" for _raw, _ci, key in pieces]
        self.database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self.database.compile(
            expressions=[re.escape(raw) for raw, _ci, _key in pieces],
            ids=list(range(len(pieces))),
            elements=len(pieces),
            flags=[hyperscan.HS_FLAG_CASELESS if ci else 0 for _raw, ci, _key in pieces],
        )
        self._local = threading.local()

    def lines(self, chunk: bytes) -> Iterator[tuple[int, int, list[str]]]:
        hits: list[tuple[int, int]] = []

        def collect(index: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            hits.append((end, index))

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan

            scratch = self._local.scratch = hyperscan.Scratch(self.database)
        self.database.scan(chunk, match_event_handler=collect, scratch=scratch)
        hits.sort()
        size = len(chunk)
        line_end = -1
        line_start = 0
        found: list[str] = []
        for end, index in hits:
            if end > line_end:
                if found or line_end >= 0:
                    yield line_start, line_end, found
                line_start = chunk.rfind(b"\n", 0, end - 1) + 1
                line_end = chunk.find(b"\n", end - 1)
                if line_end < 0:
                    line_end = size
                found = []
            if self.keys[index]:
                found.append(self.keys[index])
        if line_end >= 0:
            yield line_start, line_end, found


def make_prefilter(pieces: list[tuple[bytes, bool, str | None]]) -> RegexPrefilter | HyperscanPrefilter:
    if os.environ.get("RLTRIAGE_PREFILTER") != "regex":
        try:
            return HyperscanPrefilter(pieces)
        except Exception:  # noqa: BLE001 - no wheel for this platform: RE2 is the next fastest
            pass
    return RegexPrefilter(pieces)


def _every_line(prefilter: RegexPrefilter | HyperscanPrefilter | None, chunk: bytes) -> Iterator[tuple[int, int, list[str]]]:
    """Every line, with the literals found on it: used when some signature has no literal."""
    found_on: dict[int, list[str]] = {}
    if prefilter is not None:
        for start, _end, found in prefilter.lines(chunk):
            found_on[start] = found
    position = 0
    size = len(chunk)
    while position < size:
        end = chunk.find(b"\n", position)
        if end < 0:
            end = size
        yield position, end, found_on.get(position, [])
        position = end + 1


def extract(sig: CompiledSignature, match: Any) -> dict[str, Any]:
    values = {}
    for name, text in match.groupdict().items():
        if text is None:
            continue
        values[name] = convert(text, sig.model.values.get(name, ValueType.str))
    return values


def _last_timestamp(tail: bytes) -> float | None:
    for raw in reversed(tail.splitlines()[-200:]):
        stamp = timestamp(raw.decode("utf-8", "replace"))
        if stamp is not None:
            return stamp
    return None


def config_keys(kb: KnowledgeBase) -> list[str]:
    keys = set(WELL_KNOWN_CONFIG_KEYS)
    for loaded in kb.rules:
        for _section, _index, pattern in loaded.model.when.patterns():
            if pattern.fact == "config":
                for name in ("key", "name"):
                    value = pattern.where.get(name)
                    if isinstance(value, str):
                        keys.add(value)
                    elif isinstance(value, list):
                        keys.update(v for v in value if isinstance(v, str))
                    elif value is not None and getattr(value, "matches", None):
                        literal = re.sub(r"^\(\^\|\\\.\)|\$$", "", str(value.matches))  # type: ignore[union-attr]
                        if re.fullmatch(r"(?:[\w]|\\\.)+", literal):
                            keys.add(literal.replace("\\.", "."))
    return sorted(keys)


SCAN_MODES = {"reference": False, "aggregate": True, "auto": None}


def scanner_for(kb: KnowledgeBase) -> Scanner:
    """The knowledge base's scanner, built once and kept with it. RLTRIAGE_SCAN=reference keeps every
    line on the full path, =aggregate takes the aggregated path from the first byte (for tests)."""
    mode = SCAN_MODES.get(os.environ.get("RLTRIAGE_SCAN", "auto"), None)
    key = ("scanner", mode, native_available())  # RLTRIAGE_NATIVE=0 is seen when the matcher is built
    return kb.cache.get(key, lambda: _frozen(Scanner(kb, config_keys(kb), aggregate=mode)))


def _frozen(scanner: Scanner) -> Scanner:
    """The scanner, once every object alive (the knowledge base, its compiled patterns) has been
    moved out of the collector's sight: they live as long as the process, and a scan allocates per
    line, which would have the collector walk them over and over."""
    gc.freeze()
    return scanner
