"""What the html report shows beyond the diagnosis: a timeline with one row per process found in the
inputs, and redacted excerpts of the logs around every cited line.

The Diagnosis carries the cited lines only. A timeline needs more: each process's first and last
line and their times, its stage markers and progress, its failures, where its stack dump says it
waits. Those come from the analysis (scans, parsed failures, inference facts) and from one more
streaming pass over the inputs, made only when a format asks for it (`Analysis.details()`).

The timeline model:

* a **row** is a process: a rank (`[rank3]:` prefixes, `rank3.log`, `stacks-rank3.txt` are one
  row), a Ray actor or vLLM engine (`(WorkerDict pid=12)`), a process named only by a stack dump
  (`Process 4121:`), or a log file's own writer (the driver's `train.log`);
* the **axis** is the runs's clock, from the log timestamps (year-less stamps share a year: only
  differences count). A file without any timestamp is placed by line order and its row says so;
  a stack dump without one is drawn at the end of the window, when dumps are taken;
* **marks** sit on rows at their line's time: stages, progress, failures, cited evidence, the
  stack a dump shows, the last line written; **silences** are spans where a process wrote nothing
  for long, ending at the end of the window when it never wrote again;
* **flags** single rows out: the boundary proof's line, the first failure, the process that went
  silent first, the odd one out of the stack dumps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from ..base.contract import Diagnosis
from ..base.markers import BAR_COUNT, STAGE_MARKER
from ..base.vocabulary import LOG_KINDS, InputKind
from ..infer.fact import Fact
from ..infer.results import Inference
from ..inputs.discover import Source
from ..inputs.failures import strip_headers
from ..inputs.lines import bounded_lines
from ..inputs.normalize import ANSI, timestamp
from ..inputs.stacks import RANK_IN_NAME
from .redact import CUT_MARGIN, MASK, cut, redact
from .scan import FileScan

# --- limits: a 256-rank run stays a page a browser opens at once ------------------------------------

MAX_ROWS = 600  # rows drawn; the rest are counted
MAX_PROCESSES_PER_FILE = 2048  # prefixes beyond these are counted with the file's own row
MAX_MARKERS = 40  # stage markers per row
MAX_PROGRESS = 12  # progress ticks per row
MAX_FAILURES = 8  # failure marks per row
MAX_EVIDENCE = 12  # cited-evidence marks per row
MAX_GAPS = 4  # silences inside a row's activity
MAX_CITED = 400  # cited lines with an excerpt
MAX_CITED_PER_CAUSE = 8
CONTEXT = 3  # lines either side of a cited line
MAX_LINE_BYTES = 64 * 1024  # longer lines are cut while reading
TEXT = 400  # characters of a line kept for hover texts and excerpts
SAMPLES_PER_FILE = 50_000  # timestamps parsed per file at most (every nth line beyond)
MIN_SILENCE = 30.0  # a silence lasts at least this many seconds,
SILENCE_SHARE = 0.15  # and this share of the window,
LONG_SILENCE = 600.0  # or this long whatever the window
CHUNK = 1 << 20
JUMP_BACK = 3600.0  # a file's clock may step back this far (lines from several processes interleave)
JUMP_FORWARD = 2 * 86400.0  # or forward this far from one stamped line to the next
OFF_CLOCK_LINES = 50  # stamped lines in a row off the clock that make it the file's clock

_PREFIX_START = (b"[", b"(", b"\x1b")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BAR_COUNT = re.compile(BAR_COUNT)
_MARKER = b"[rltriage] stage="
_CLOCK = re.compile(rb"\d\d:\d\d:\d\d")  # every timestamp `timestamp()` reads has one: the cheap test first
_KEY_EDGE = b"PRIVATE KEY-----"
_ROLE_ORDER = {"driver": 0, "log": 1, "rank": 2, "worker": 3, "engine": 4, "process": 5, "dump": 6}
_ENGINE_NAME = re.compile(r"vllm|sglang|llm|engine|rollout", re.IGNORECASE)
_ACTOR_PID = re.compile(r" pid=(\d+)$")
_ALSO_RANK = re.compile(r"^[(\[][^)\]]{0,200}[)\]] ?\[rank(\d+)\]:")
_WORKER_FILE_PID = re.compile(r"[-_](\d+)\.(?:err|out|log)$")


# --- the model ---------------------------------------------------------------------------------------


@dataclass
class Mark:
    kind: str  # stage | marker | progress | failure | evidence | boundary | stack | last
    path: str
    line: int
    label: str
    text: str
    time: float | None = None  # seconds on the run's clock
    pos: float = 0.0  # 0..1 along the axis
    placed: str = "time"  # time | lines (by line order) | end (a dump without a time)
    anchor: str | None = None  # id of its line in the excerpts, when embedded
    primary: bool = False
    where: str = ""  # `rank3.log:812`: the shortest path suffix that names the file among the inputs


@dataclass
class Span:
    start: float  # positions 0..1
    end: float
    seconds: float


@dataclass
class Row:
    id: str
    label: str
    role: str
    paths: list[str]
    lines: int = 0
    clock: str = "time"  # time | lines | dump
    first: float | None = None
    last: float | None = None
    start: float = 0.0  # activity, positions 0..1
    end: float = 0.0
    marks: list[Mark] = field(default_factory=list)
    silences: list[Span] = field(default_factory=list)
    last_line: Mark | None = None
    waits_in: str | None = None
    progress: str | None = None
    aka: list[str] = field(default_factory=list)  # the Ray actors this process also goes by
    flags: list[str] = field(default_factory=list)  # boundary | first-failure | silent-first | odd-one-out
    failed: bool = False


@dataclass
class Tick:
    pos: float
    label: str


@dataclass
class Timeline:
    rows: list[Row]
    clock: str  # time | lines
    start: float | None = None
    end: float | None = None
    origin: str = ""  # the window's start as the logs print it
    ticks: list[Tick] = field(default_factory=list)
    boundary: Mark | None = None
    findings: list[tuple[str, str, str | None]] = field(default_factory=list)  # (kind, sentence, row id)
    hidden_rows: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start


@dataclass
class ExcerptLine:
    number: int
    text: str
    anchor: str
    cited: bool


@dataclass
class Excerpt:
    path: str
    blocks: list[list[ExcerptLine]]


@dataclass
class RunDetails:
    """The timeline and the excerpts, built from an analysis; what the html format adds."""

    timeline: Timeline
    excerpts: list[Excerpt]
    anchors: dict[tuple[str, int], str]
    redacted: bool = True

    def anchor(self, path: str, line: int) -> str | None:
        return self.anchors.get((path, line))


# --- one pass over a file --------------------------------------------------------------------------


@dataclass
class _Process:
    id: str
    lines: int = 0
    first_line: int = 0
    first_time: float | None = None
    last_line: int = 0
    last_raw: bytes = b""
    last_time: float | None = None
    prev_time: float | None = None
    gaps: list[tuple[float, float]] = field(default_factory=list)
    markers: list[tuple[int, float | None, str]] = field(default_factory=list)
    progress: list[tuple[int, float | None, int, int, str]] = field(default_factory=list)


@dataclass
class _Line:
    process: str
    time: float | None
    text: str


@dataclass
class _FileRead:
    path: str
    lines: int = 0
    stamped: bool = False
    first_time: float | None = None
    processes: dict[str, _Process] = field(default_factory=dict)
    wanted: dict[int, _Line] = field(default_factory=dict)
    kept: dict[int, str] = field(default_factory=dict)
    ranks: dict[str, str] = field(default_factory=dict)  # an actor → the rank its lines also name


def clean(text: str) -> str:
    """A line as a page shows it: no colour codes, no control characters, no lone surrogates."""
    text = ANSI.sub("", text)
    text = _CONTROL.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _text(raw: bytes) -> str:
    # Cut where no secret is split: the excerpt is redacted after the cut.
    return cut(clean(raw[: TEXT * 4 + CUT_MARGIN].decode("utf-8", "replace").rstrip("\r")), TEXT)


def _last_segment(raw: bytes) -> bytes:
    """A line of carriage-return redraws as a terminal last showed it."""
    if b"\r" not in raw:
        return raw
    parts = [p for p in raw.split(b"\r") if p.strip()]
    return parts[-1] if parts else raw


def read_file(
    source: Source,
    default: str,
    lines_hint: int,
    wanted: Sequence[int],
    windows: Sequence[tuple[int, int]],
    redact_keys: bool,
    track: bool = True,
) -> _FileRead:
    """One streaming pass: per process its lines, first and last line, times, silences, stage
    markers and progress; the wanted lines with their process and time; the lines of the windows."""
    out = _FileRead(source.display)
    stride = max(1, lines_hint // SAMPLES_PER_FILE)
    processes = out.processes
    wanted_at = 0
    next_wanted = wanted[0] if wanted else -1
    window_at = 0
    window = windows[0] if windows else (-1, -1)
    file_time: float | None = None
    off_clock = 0
    in_key = False
    own = processes.setdefault(default, _Process(default))
    try:
        stream = source.open()
    except OSError:
        return out
    with stream:
        number = 0
        try:
            for raw in bounded_lines(stream, MAX_LINE_BYTES, CHUNK):
                number += 1
                process = own
                if track and raw[:1] in _PREFIX_START:
                    head = raw[:300].decode("utf-8", "replace")
                    _stripped, named = strip_headers(head)
                    if named is not None:
                        if named not in out.ranks and not named.startswith("rank"):
                            also = _ALSO_RANK.search(head)
                            if also is not None:  # `(RayWorkerWrapper pid=3310) [rank12]:` is rank12
                                out.ranks[named] = f"rank{also.group(1)}"
                        found = processes.get(named)
                        if found is None and len(processes) < MAX_PROCESSES_PER_FILE:
                            found = processes[named] = _Process(named)
                        process = found or own
                special = _MARKER in raw or b"%|" in raw
                if (number % stride == 0 or special or number == next_wanted) and _CLOCK.search(raw, 0, 200):
                    stamp = timestamp(raw[:200].decode("utf-8", "replace"))
                    if stamp is not None and file_time is not None and not -JUMP_BACK <= stamp - file_time <= JUMP_FORWARD:
                        # A stamp far off the file's clock (another component's clock, a date quoted in
                        # a message) is ignored, unless the file keeps to the new clock.
                        off_clock += 1
                        if off_clock < OFF_CLOCK_LINES:
                            stamp = None
                    elif stamp is not None:
                        off_clock = 0
                    if stamp is not None:
                        file_time = stamp
                        if out.first_time is None:
                            out.first_time = stamp
                        out.stamped = True
                else:
                    stamp = None
                if track:
                    if process.lines == 0:
                        process.first_line = number
                        process.first_time = file_time
                    process.lines += 1
                    process.last_line = number
                    process.last_raw = raw
                    if file_time is not None:
                        if process.first_time is None:
                            process.first_time = file_time
                        previous = process.prev_time
                        if previous is not None and file_time - previous > MIN_SILENCE:
                            process.gaps.append((previous, file_time))
                            if len(process.gaps) > MAX_GAPS * 4:
                                process.gaps.sort(key=lambda g: g[0] - g[1])
                                del process.gaps[MAX_GAPS:]
                        process.prev_time = file_time
                        process.last_time = file_time
                    if special:
                        _special(process, number, file_time, raw)
                if _KEY_EDGE in raw:
                    in_key = b"BEGIN" in raw and b"END" not in raw.split(b"BEGIN", 1)[1]
                    masked = False  # the line itself: redact() masks from BEGIN on
                else:
                    masked = in_key and redact_keys
                if number == next_wanted:
                    out.wanted[number] = _Line(process.id, stamp if stamp is not None else file_time, MASK if masked else _text(raw))
                    wanted_at += 1
                    next_wanted = wanted[wanted_at] if wanted_at < len(wanted) else -1
                if number >= window[0] and window[0] > 0:
                    while number > window[1] and window_at < len(windows):
                        window_at += 1
                        window = windows[window_at] if window_at < len(windows) else (-1, -1)
                    if window[0] <= number <= window[1]:
                        out.kept[number] = MASK if masked else _text(raw)
                elif not track and next_wanted < 0 and window[0] < 0:
                    break  # nothing more to take from this file
        except (OSError, EOFError, ValueError):
            pass  # a file that ends early keeps what was read: the scan warned already
        out.lines = number
    if not own.lines and len(processes) > 1:
        del processes[default]
    return out


def _special(process: _Process, number: int, time: float | None, raw: bytes) -> None:
    if _MARKER in raw:
        text = raw[:2000].decode("utf-8", "replace")
        for match in STAGE_MARKER.finditer(text):
            if len(process.markers) < MAX_MARKERS * 4:
                step = match.group("step")
                process.markers.append((number, time, match.group("stage") + (f" step {step}" if step else "")))
    if b"%|" in raw:
        bar = _BAR_COUNT.search(_last_segment(raw)[-400:].decode("utf-8", "replace"))
        if bar is not None:
            n, m = int(bar.group("n")), int(bar.group("m"))
            if not process.progress or process.progress[-1][2] != n:
                process.progress.append((number, time, n, m, f"{n}/{m}"))
                if len(process.progress) > 2000:
                    del process.progress[1:-1:2]


# --- from the analysis to the model ----------------------------------------------------------------


@dataclass
class _Request:
    kind: str
    path: str
    line: int
    label: str
    process: str | None = None  # the row, when the fact names it (stack dumps)
    text: str | None = None
    cause: int | None = None  # rank of the cause it is evidence of


def build_details(
    scans: Sequence[FileScan],
    inference: Inference,
    diagnosis: Diagnosis,
    sources: Sequence[Source],
    redacted: bool = True,
) -> RunDetails:
    """The timeline and the excerpts of a diagnosed run; its sources are read once more."""
    scrub: Callable[[str], str] = lru_cache(maxsize=4096)(redact) if redacted else (lambda text: text)
    cited = _cited(diagnosis)
    requests = _requests(scans, inference, diagnosis)
    reads, defaults = _read_all(sources, scans, requests, cited, redacted)
    excerpts, anchors = _excerpts(reads, cited, scrub)
    outlier = next(iter(inference.facts_of("stack_outlier")), None)
    builder = _Builder(scans, reads, defaults, anchors, scrub, requests)
    return RunDetails(builder.build(diagnosis, outlier), excerpts, anchors, redacted)


def _cited(diagnosis: Diagnosis) -> dict[str, set[int]]:
    """The lines the report cites, which get an excerpt: boundary proof, causes, failures, unexplained."""
    evidence: list[tuple[str, int]] = [(e.path, e.line) for e in diagnosis.boundary.evidence]
    for cause in diagnosis.causes:
        evidence += [(e.path, e.line) for e in cause.evidence[:MAX_CITED_PER_CAUSE]]
    evidence += [(f.path, f.line) for f in diagnosis.failures]
    evidence += [(u.evidence.path, u.evidence.line) for u in diagnosis.unexplained]
    cited: dict[str, set[int]] = {}
    for path, line in list(dict.fromkeys(evidence))[:MAX_CITED]:
        cited.setdefault(path, set()).add(line)
    return cited


def _requests(scans: Sequence[FileScan], inference: Inference, diagnosis: Diagnosis) -> list[_Request]:
    """The lines the analysis knows something about, each to become a mark on its process's row."""
    dumps = {scan.path for scan in scans if scan.kind is InputKind.stack_dump}
    requests: list[_Request] = []
    for index, evidence in enumerate(diagnosis.boundary.evidence):
        requests.append(_Request("boundary", evidence.path, evidence.line, "boundary proof", cause=index))
    for index, cause in enumerate(diagnosis.causes):
        for evidence in cause.evidence[:MAX_CITED_PER_CAUSE]:
            requests.append(_Request("evidence", evidence.path, evidence.line, f"#{index + 1} {cause.rule}", cause=index))
    for fact in inference.facts_of("stage"):
        for line in fact.evidence[:16]:
            if line.path not in dumps:  # a stage a dump's frames prove is drawn as its stack
                requests.append(_Request("stage", line.path, line.line, str(fact.get("name"))))
    for fact in inference.facts_of("stack"):
        if fact.get("dump") != "traceback":
            top = str(fact.get("top") or "")
            requests.append(_Request("stack", str(fact.get("path")), int(fact.get("line") or 0), top, process=str(fact.get("process")), text=top))
    for scan in scans:
        if scan.kind not in LOG_KINDS:
            continue
        ends: dict[int, int] = {}
        for failure in scan.failures:
            ends[failure.chain] = max(failure.position, ends.get(failure.chain, 0))
        for failure in scan.failures:
            if not failure.ignored and failure.position == ends[failure.chain]:  # the exception that ended its chain
                label = failure.type + (f": {failure.message}" if failure.message else "")
                requests.append(_Request("failure", scan.path, failure.line, label[:160]))
    return requests


def _read_all(
    sources: Sequence[Source], scans: Sequence[FileScan], requests: list[_Request], cited: dict[str, set[int]], redacted: bool
) -> tuple[dict[str, _FileRead], dict[str, str]]:
    """Every log once more (and any other file a citation points into), in input order."""
    scan_of = {scan.path: scan for scan in scans}
    wanted: dict[str, set[int]] = {path: set(lines) for path, lines in cited.items()}
    for request in requests:
        if request.line > 0:
            wanted.setdefault(request.path, set()).add(request.line)
    reads: dict[str, _FileRead] = {}
    defaults: dict[str, str] = {}
    for source in sources:
        scan = scan_of.get(source.display)
        if scan is None:
            continue
        is_log = scan.kind in LOG_KINDS
        if not is_log and source.display not in wanted:
            continue
        defaults[source.display] = _file_default(source.display)
        lines = sorted(wanted.get(source.display, ()))
        windows = _windows(cited.get(source.display, set()))
        reads[source.display] = read_file(source, defaults[source.display], scan.lines, lines, windows, redacted, track=is_log)
    return reads, defaults


def _excerpts(reads: dict[str, _FileRead], cited: dict[str, set[int]], scrub: Callable[[str], str]) -> tuple[list[Excerpt], dict[tuple[str, int], str]]:
    file_index = {path: index for index, path in enumerate(sorted(reads))}
    anchors: dict[tuple[str, int], str] = {}
    excerpts: list[Excerpt] = []
    for path in sorted(cited):
        read = reads.get(path)
        if read is None or not read.kept:
            continue
        blocks: list[list[ExcerptLine]] = []
        previous = -1
        for number in sorted(read.kept):
            anchor = f"L{file_index[path]}-{number}"
            anchors[(path, number)] = anchor
            if number != previous + 1 or not blocks:
                blocks.append([])
            blocks[-1].append(ExcerptLine(number, scrub(read.kept[number]), anchor, number in cited[path]))
            previous = number
        excerpts.append(Excerpt(scrub(clean(path)), blocks))
    return excerpts, anchors


class _Builder:
    """The timeline from what the pass read and what the analysis asked to mark."""

    def __init__(
        self,
        scans: Sequence[FileScan],
        reads: dict[str, _FileRead],
        defaults: dict[str, str],
        anchors: dict[tuple[str, int], str],
        scrub: Callable[[str], str],
        requests: list[_Request],
    ) -> None:
        self.kind_of = {scan.path: scan.kind for scan in scans}
        self.reads = reads
        self.logs = {path: read for path, read in reads.items() if self.kind_of.get(path) in LOG_KINDS}
        self.defaults = defaults
        self.anchors = anchors
        self.scrub = scrub
        self.requests = requests
        self.rows: dict[str, Row] = {}
        self.kinds: dict[str, set[InputKind]] = {}
        self.own: dict[str, bool] = {}  # rows that are a file's own writer
        self.activity: dict[str, list[tuple[str, _Process]]] = {}
        self.start: float | None = None
        self.span: float | None = None
        self.clock = "lines"
        self.alias = self._aliases()
        self.short = _labels(sorted(reads))

    def _aliases(self) -> dict[str, str]:
        """A Ray worker's own file (`worker-<id>-<pid>.err`) and the lines a driver shows with its
        prefix (`(WorkerDict pid=<pid>)`) are one process: the file's row is the actor's."""
        actors: dict[str, set[str]] = {}
        for read in self.logs.values():
            for name in read.processes:
                match = _ACTOR_PID.search(name)
                if match:
                    actors.setdefault(match.group(1), set()).add(name)
        alias: dict[str, str] = {}
        for read in self.logs.values():
            alias.update(read.ranks)
        for path in self.logs:
            if self.kind_of[path] in (InputKind.ray_worker_err, InputKind.ray_worker_out):
                match = _WORKER_FILE_PID.search(path)
                named = actors.get(match.group(1), set()) if match else set()
                if len(named) == 1:
                    alias[self.defaults[path]] = next(iter(named))
        return alias

    def resolve(self, process: str) -> str:
        for _ in range(3):  # a worker's file → its actor → the rank it runs
            process = self.alias.get(process, process)
        return process

    # rows and axis

    def _row(self, row_id: str, path: str, own: bool, name: str | None = None) -> Row:
        found = self.rows.get(row_id)
        if found is None:
            found = self.rows[row_id] = Row(row_id, row_id, "", [])
            self.kinds[row_id] = set()
            self.own[row_id] = own
        if path not in found.paths:
            found.paths.append(path)
        if name is not None and name != row_id and " pid=" in name and name not in found.aka:
            found.aka.append(name)
        self.kinds[row_id].add(self.kind_of[path])
        self.own[row_id] = self.own[row_id] or own
        return found

    def stack_row(self, process: str, path: str) -> str:
        """The row of a stack fact's process: the file's own row when the fact names the file."""
        if not process or process == path.rsplit("/", 1)[-1]:
            return self.resolve(self.defaults.get(path, path))
        return self.resolve(process)

    def _make_rows(self) -> None:
        named: dict[str, set[str]] = {}  # dump file → the processes its stacks name
        for request in self.requests:
            if request.kind == "stack" and request.path in self.logs:
                named.setdefault(request.path, set()).add(self.stack_row(request.process or "", request.path))
        for path, read in self.logs.items():
            default = self.defaults[path]
            dump = self.kind_of[path] is InputKind.stack_dump
            for process in read.processes.values():
                row_id = self.resolve(process.id)
                if dump:
                    if process.id != default or not named.get(path) or row_id in named[path]:
                        self._row(row_id, path, process.id == default, process.id)
                    continue  # a dump's lines are py-spy's, not the process's: its stack is its mark
                self._row(row_id, path, process.id == default, process.id)
                self.activity.setdefault(row_id, []).append((path, process))
            for name in sorted(named.get(path, ())):
                self._row(name, path, name == default)

    def _make_axis(self) -> None:
        times = [t for read in self.logs.values() for p in read.processes.values() for t in (p.first_time, p.last_time) if t is not None]
        for request in self.requests:
            read = self.reads.get(request.path)
            line = read.wanted.get(request.line) if read is not None else None
            if line is not None and line.time is not None:
                times.append(line.time)
        if times and any(read.stamped for read in self.logs.values()):
            self.start = min(times)
            self.span = max(max(times) - self.start, 1.0)
            self.clock = "time"

    def place(self, path: str, line: int, time: float | None) -> tuple[float, str]:
        """Where a line sits on the axis, and how it was placed: by its time, at the end (a dump
        without a time), or by its line number within its file."""
        read = self.logs.get(path)
        if self.clock == "time" and read is not None and read.stamped:
            when = time if time is not None else read.first_time
            if when is not None and self.start is not None and self.span:
                return min(1.0, max(0.0, (when - self.start) / self.span)), "time"
        if self.clock == "time" and self.kind_of.get(path) is InputKind.stack_dump:
            return 1.0, "end"
        total = read.lines if read is not None else line
        return min(1.0, max(0.0, (line - 0.5) / max(total, 1))), "lines"

    def mark(self, kind: str, path: str, line: int, label: str, text: str, time: float | None) -> Mark:
        pos, placed = self.place(path, line, time)
        scrub = self.scrub
        where = scrub(clean(f"{self.short.get(path, path)}:{line}"))
        return Mark(kind, scrub(clean(path)), line, scrub(clean(label))[:200], scrub(text), time, pos, placed, self.anchors.get((path, line)), where=where)

    def at(self, time: float | None) -> str:
        """` at +12:05` on a timed axis."""
        if time is None or self.start is None or self.clock != "time":
            return ""
        return f" at {offset(time - self.start)}"

    # what each row shows

    def _fill_activity(self) -> None:
        """Per row: its lines, the span it wrote in, its last line, silences, stage markers, progress."""
        for row_id, found in self.rows.items():
            found.role = _role(row_id, self.kinds[row_id], self.own[row_id])
            timed = any(self.logs[path].stamped for path, _p in self.activity.get(row_id, ()))
            if self.kinds[row_id] == {InputKind.stack_dump}:
                found.clock = "dump"
            else:
                found.clock = "time" if timed and self.clock == "time" else "lines"
            positions: list[float] = []
            last: tuple[float, int, str, _Process] | None = None
            progress: list[tuple[str, int, float | None, int, int, str]] = []
            for path, process in self.activity.get(row_id, []):
                found.lines += process.lines
                first_pos, _ = self.place(path, process.first_line, process.first_time)
                last_pos, _ = self.place(path, process.last_line, process.last_time)
                positions += [first_pos, last_pos]
                if process.first_time is not None:
                    found.first = process.first_time if found.first is None else min(found.first, process.first_time)
                if process.last_time is not None:
                    found.last = process.last_time if found.last is None else max(found.last, process.last_time)
                if last is None or (last_pos, process.last_line) > last[:2]:
                    last = (last_pos, process.last_line, path, process)
                for number, time, stage in process.markers[:MAX_MARKERS]:
                    found.marks.append(self.mark("marker", path, number, stage, stage, time))
                progress += [(path, *point) for point in process.progress]
                self._gaps(found, process)
            if positions:
                found.start, found.end = min(positions), max(positions)
            if last is not None:
                _pos, number, path, process = last
                found.last_line = self.mark("last", path, number, "last line", _text(_last_segment(process.last_raw)), process.last_time)
            if progress:
                for path, number, time, _n, _m, label in _spread(progress, MAX_PROGRESS):
                    found.marks.append(self.mark("progress", path, number, label, label, time))
                found.progress = progress[-1][-1]

    def _gaps(self, found: Row, process: _Process) -> None:
        if self.clock != "time" or self.start is None or not self.span:
            return
        for gap_start, gap_end in sorted(process.gaps, key=lambda g: g[0] - g[1])[:MAX_GAPS]:
            if gap_end - gap_start >= silence(self.span):
                found.silences.append(Span((gap_start - self.start) / self.span, (gap_end - self.start) / self.span, gap_end - gap_start))

    def _tail_silences(self) -> None:
        """A process that never wrote again is silent until the end of the window."""
        if self.clock != "time" or self.start is None or not self.span:
            return
        end = self.start + self.span
        for found in self.rows.values():
            if found.clock == "time" and found.last is not None and end - found.last >= silence(self.span):
                found.silences.append(Span((found.last - self.start) / self.span, 1.0, end - found.last))

    def _requested_marks(self, diagnosis: Diagnosis) -> tuple[Mark | None, list[tuple[float, Row, Mark]]]:
        """The analysis's marks; returns the boundary mark and the failure marks."""
        taken: dict[tuple[str, str], int] = {}
        seen = {(row_id, m.line, m.path) for row_id, found in self.rows.items() for m in found.marks if m.kind == "marker"}
        failures: list[tuple[float, Row, Mark]] = []
        boundary: Mark | None = None
        limits = {"failure": MAX_FAILURES, "evidence": MAX_EVIDENCE, "stage": MAX_MARKERS, "boundary": MAX_EVIDENCE}
        for request in self.requests:
            read = self.reads.get(request.path)
            line = read.wanted.get(request.line) if read is not None else None
            if request.kind == "stack":
                row_id = self.stack_row(request.process or "", request.path)
            elif line is not None:
                row_id = self.resolve(line.process)
            else:
                continue
            found = self.rows.get(row_id)
            if found is None:
                continue
            primary = request.kind in ("boundary", "evidence") and request.cause == 0
            key = (row_id, request.line, self.scrub(clean(request.path)))
            if request.kind == "stage" and key in seen:
                continue  # the stage marker itself is drawn already
            seen.add(key)
            count = taken.get((row_id, request.kind), 0)
            if count >= limits.get(request.kind, 16) and not primary:
                continue
            taken[(row_id, request.kind)] = count + 1
            text = line.text if line is not None else (request.text or "")
            made = self.mark(request.kind, request.path, request.line, request.label, text, line.time if line is not None else None)
            made.primary = primary
            if request.kind == "stack":
                found.waits_in = self.scrub(clean(request.label))
            elif request.kind == "boundary" and primary:
                made.label = "boundary: " + _boundary_label(diagnosis)
                boundary = made
                found.flags.append("boundary")
            elif request.kind == "failure":
                failures.append((made.time if made.time is not None else float("inf"), found, made))
                found.failed = True
            found.marks.append(made)
        return boundary, failures

    # the rows that stand out

    def _findings(self, diagnosis: Diagnosis, boundary: Mark | None, failures: list[tuple[float, Row, Mark]], outlier: Fact | None) -> list[tuple[str, str, str | None]]:
        findings: list[tuple[str, str, str | None]] = []
        if boundary is not None:
            holder = next((r.id for r in self.rows.values() if any(m is boundary for m in r.marks)), None)
            findings.append(("boundary", f"Boundary: {_boundary_label(diagnosis)}{self.at(boundary.time)} ({boundary.path}:{boundary.line})", holder))
        if failures:
            failures.sort(key=lambda item: (item[0], _row_order(item[1]), item[2].line))
            _time, row, first = failures[0]
            first.primary = True
            row.flags.append("first-failure")
            findings.append(("first-failure", f"First failure: {row.id}{self.at(first.time)}: {first.label} ({first.path}:{first.line})", row.id))
        if outlier is not None:
            odd = self.rows.get(self.stack_row(str(outlier.get("process")), str(outlier.get("path"))))
            if odd is not None:
                odd.flags.append("odd-one-out")
                majority = outlier.get("majority_top") or "the same frame"
                sentence = f"Odd one out: {odd.id} is in {outlier.get('top')} while {outlier.get('majority_count')} of {outlier.get('total')} processes are in {majority}"
                findings.append(("odd-one-out", sentence, odd.id))
        silent = _silent_first(self.rows, self.span)
        if silent is not None:
            quiet, lead = silent
            quiet.flags.append("silent-first")
            sentence = f"Went silent first: {quiet.id}{self.at(quiet.last)}, {_duration(lead)} before the other processes' median last line"
            if quiet.last_line is not None:
                sentence += f"; its last line: {quiet.last_line.text.strip()[:160]}"
            findings.append(("silent-first", sentence, quiet.id))
        return [(kind, self.scrub(clean(sentence)), self.scrub(clean(row_id)) if row_id else None) for kind, sentence, row_id in findings]

    def build(self, diagnosis: Diagnosis, outlier: Fact | None) -> Timeline:
        self._make_rows()
        self._make_axis()
        self._fill_activity()
        boundary, failures = self._requested_marks(diagnosis)
        findings = self._findings(diagnosis, boundary, failures, outlier)
        self._tail_silences()
        labels = _labels([r.id for r in self.rows.values() if self.own[r.id] and not re.fullmatch(r"rank\d+", r.id)])
        for found in self.rows.values():
            found.label = self.scrub(clean(labels.get(found.id, found.id)))
            found.paths = [self.scrub(clean(p)) for p in found.paths]
            found.marks.sort(key=lambda m: (m.pos, m.line))
        ordered = sorted(self.rows.values(), key=_row_order)
        hidden = max(0, len(ordered) - MAX_ROWS)
        if hidden:
            kept = {id(r) for r in sorted(ordered, key=lambda r: (not r.flags, not r.failed, -len(r.marks), -r.lines))[:MAX_ROWS]}
            ordered = [r for r in ordered if id(r) in kept]
        for found in ordered:
            found.id = self.scrub(clean(found.id))
            found.aka = [self.scrub(clean(name)) for name in found.aka]
        notes = []
        if self.clock == "lines":
            notes.append("No timestamps in the inputs: each row is placed by line order within its own file.")
        elif any(r.clock == "lines" for r in ordered):
            notes.append("Rows marked ‘line order’ come from files without timestamps: they are placed by line order, not by time.")
        if any(m.placed == "end" for r in ordered for m in r.marks):
            notes.append("Stack dumps carry no time: their marks are drawn at the end of the window, when dumps are taken.")
        timed = self.clock == "time" and self.start is not None and self.span
        return Timeline(
            ordered,
            self.clock,
            self.start,
            self.start + self.span if self.start is not None and self.span else None,
            _clock(self.start) if timed and self.start is not None else "",
            _ticks(self.span) if timed and self.span else [Tick(i / 4, f"{i * 25}%") for i in range(5)],
            boundary,
            findings,
            hidden,
            notes,
        )


def _file_default(path: str) -> str:
    """The row of a file's unprefixed lines: its rank when the name says one, else the file itself."""
    match = RANK_IN_NAME.search(re.split(r"[/!]", path)[-1])
    return f"rank{match.group(1)}" if match else path


def _role(row_id: str, kinds: set[InputKind], own: bool) -> str:
    if re.fullmatch(r"rank\d+", row_id):
        return "rank"
    if " pid=" in row_id:
        return "engine" if _ENGINE_NAME.search(row_id.split(" pid=", 1)[0]) else "worker"
    if not own:
        return "process"
    if InputKind.driver_log in kinds:
        return "driver"
    if kinds & {InputKind.ray_worker_err, InputKind.ray_worker_out}:
        return "worker"
    if kinds == {InputKind.stack_dump}:
        return "dump"
    if InputKind.rank_log in kinds:
        return "rank"
    return "log"


def _natural(text: str) -> tuple[object, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _row_order(found: Row) -> tuple[object, ...]:
    return (_ROLE_ORDER.get(found.role, 9), _natural(found.id))


def _labels(paths: list[str]) -> dict[str, str]:
    """The shortest path suffix that tells each file row from the others."""
    labels: dict[str, str] = {}
    for path in paths:
        parts = re.split(r"[/!]", path)
        label = path
        for size in range(1, len(parts) + 1):
            label = "/".join(parts[-size:])
            if sum(1 for other in paths if other == label or other.endswith("/" + label) or other.endswith("!" + label)) <= 1:
                break
        labels[path] = label
    return labels


def _windows(lines: set[int]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for line in sorted(lines):
        low, high = max(1, line - CONTEXT), line + CONTEXT
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def silence(span: float) -> float:
    """How long a process must write nothing for it to count as silent, in a window of `span` s."""
    return max(MIN_SILENCE, min(SILENCE_SHARE * span, LONG_SILENCE))


def _clock(seconds: float) -> str:
    return (datetime(2000, 1, 1) + timedelta(seconds=seconds)).strftime("%m-%d %H:%M:%S")


def offset(seconds: float) -> str:
    """`+12:05`, `+1:02:03`, `+4.2s`: a time on the axis from the window's start."""
    if seconds < 10 and seconds != int(seconds):
        return f"+{seconds:.1f}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"+{hours}:{minutes:02d}:{secs:02d}" if hours else f"+{minutes}:{secs:02d}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _ticks(span: float) -> list[Tick]:
    step = next((s for s in _STEPS if span / s <= 8), span / 8)
    count = int(span // step) + 1
    return [Tick(i * step / span, offset(i * step)) for i in range(min(count, 12))]


def _boundary_label(diagnosis: Diagnosis) -> str:
    b = diagnosis.boundary
    if b.last_completed is None and b.first_missing is None:
        return "where the stacks are"
    last = b.last_completed.value if b.last_completed else "no stage"
    missing = b.first_missing.value if b.first_missing else "none"
    return f"last completed {last}, never {missing}"


def _spread(points: list[tuple[str, int, float | None, int, int, str]], count: int) -> list[tuple[str, int, float | None, int, int, str]]:
    """`count` points evenly through the list, the first and the last among them."""
    if len(points) <= count:
        return points
    step = (len(points) - 1) / (count - 1)
    return [points[round(i * step)] for i in range(count)]


def _silent_first(rows: dict[str, Row], span: float | None) -> tuple[Row, float] | None:
    """The process whose last line came well before everyone else's, when at least three wrote."""
    timed = sorted((r for r in rows.values() if r.clock == "time" and r.last is not None), key=lambda r: (r.last, _row_order(r)))
    if len(timed) < 3 or not span:
        return None
    lasts = [r.last for r in timed if r.last is not None]
    first, second, median = lasts[0], lasts[1], lasts[len(lasts) // 2]
    threshold = silence(span)
    if median - first >= threshold and second - first >= threshold / 2:
        return timed[0], median - first
    return None
