"""`rltriage watch`: follow a live run's logs and diagnose it the moment it stops progressing.

    rltriage watch PATH... [--stall-after 600] [--poll 2] [--on-stall CMD] [--format text|markdown|json]

Every `--poll` seconds the watcher rescans the given folders (so per-rank logs that appear later are
followed too), reads only the bytes each file gained since the last poll, and judges every new line.
When nothing has *progressed* for `--stall-after` seconds it runs `--on-stall` (if given), runs the
ordinary diagnosis on the watched paths, prints the report to stdout and exits 4.

Activity versus progress
------------------------
A hung run is rarely silent: vLLM prints idle engine stats every 10 s, NCCL and torch watchdogs print
heartbeats, Ray folds the same line from every worker into `[repeated Nx across cluster]`, training
scripts print keep-alives. So "the file grew" (activity) is tracked, and shown, but does not reset the
stall clock. Only *progress* does:

* a step counter that moves forward: a tqdm/HF bar `N/M [` whose N is larger than the last N of the
  same bar (same file, same text before the bar, same M — a bar that restarts at 0 does not count,
  its next advance does), a verl `step:N -` line with a larger N, an `[rltriage] stage=… step=N` marker
  for a (stage, step) not seen before, any `{'loss': …}` log dict (a trainer logs one per step);
* a vLLM stats line reporting non-zero generation throughput (the engine is doing work even when the
  trainer prints nothing during a long first rollout);
* any other line whose *shape* was never seen before. The shape is the line with ANSI colours, Ray
  `[repeated Nx across cluster]` suffixes and every number, hex id and timestamp masked out, so
  `Running: 0 reqs, Waiting: 0 reqs` at 10:59:05 and at 11:29:05 are the same shape, and the second
  one is noise. A redraw of a progress bar that does not advance is never progress.

So a run that keeps progressing slowly — one step every ten minutes, a bar that creeps — is never
reported as stalled (choose `--stall-after` above the slowest step), and a run stuck behind noise is.
The clock starts when the watcher starts; what the files held already is read first, to learn the
shapes and counters, without counting as progress. Shapes and counters are kept in bounded LRU tables
and a line longer than 64 KiB is judged on its first 64 KiB, so memory stays bounded however long
the run. A file that shrinks or is replaced (a new inode at the same path) is read again from the
start; a file renamed inside a watched folder (log rotation) keeps its offset.

Crashes and exits
-----------------
A run that died is not a stall: waiting `--stall-after` seconds for it, then pointing py-spy at a
dead process, helps nobody. A new line shaped like a failure (a traceback, an exception line,
`terminate called…`, `Fatal Python error`, a fatal signal, an exit code) makes the watcher diagnose
the run once the lines after it have arrived (the next poll); when the diagnosis lists a failure
(`Diagnosis.failures`) or a crash / out-of-memory cause, the watch ends at once with exit 5 and the
report. A failure-looking line the diagnosis does not confirm (a warning that prints a traceback)
lets the watch go on. With `--pid PID` (repeatable) the watcher also checks that the run's
processes are alive: when all of them are gone without the finish line, it diagnoses and exits 5.

Exit codes: 0 the run finished (a final `{'train_runtime': …}` dict or `Training completed` line) or
every watched path disappeared; 2 bad invocation or a missing path; 3 knowledge-base error;
4 stalled; 5 crashed or exited without finishing (the report is on stdout for 4 and 5).

`--on-stall CMD` runs a shell command before the diagnosis (for example
`py-spy dump --pid $PID > run/stacks.txt`), at most `--on-stall-timeout` seconds. Its environment
carries the run's context (see `on_stall_environment`): `PID` and `RLTRIAGE_PIDS` (the `--pid`
values, then the pids the logs name — `pid=N`, `(pid: N)`, `PID N`, `Process N:` — first seen first),
`RLTRIAGE_FILES` (the files watched, one per line), `RLTRIAGE_PATHS` (the paths given),
`RLTRIAGE_DIAGNOSIS` (a JSON diagnosis of the stalled run, written just before the command runs),
`RLTRIAGE_ON_STALL_OUTPUT` (the file its output goes to) and `RLTRIAGE_STALLED_SECONDS`. Its stdout
and stderr are appended to `rltriage-on-stall.txt` in the first PATH when that is a folder,
otherwise to a temporary file; either way that file is part of the final diagnosis's input, so a
stack dump it prints is read by the same rules as the logs.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import signal
import stat
import subprocess
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

from ..base.errors import InputError
from ..base.markers import BAR_COUNT, STAGE_MARKER
from ..base.text import printable
from ..base.vocabulary import Symptom
from ..inputs.discover import SNIFF_BYTES, looks_binary
from ..inputs.failures import (
    EXIT_STATUS,
    EXITCODE,
    FATAL_PYTHON,
    INLINE_EXCEPTION,
    KILLED_BY,
    SHELL_SIGNAL,
    SIGNAL_RECEIVED,
    TERMINATE,
    TRACEBACK,
)
from ..inputs.normalize import ANSI, REPEATED
from ..inputs.walk import folders
from ..kb.load import load_knowledge_base
from ..pipeline.redact import cut, redact
from ..pipeline.render import format_diagnosis
from ..pipeline.run import Analysis, analyse

ON_STALL_FILE = "rltriage-on-stall.txt"
READ_CHUNK = 1 << 20
MAX_LINE = 64 * 1024
MAX_SHAPES = 100_000
MAX_COUNTERS = 10_000

_HEXISH = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b")
_NUMBERS = re.compile(r"\d+(?:[.,:/_-]\d+)*")
_SPACES = re.compile(r"\s+")
# The text before a bar's percentage (or before N/M when there is none) names the bar; the fill
# characters between the percentage and N/M change on every redraw, so they must not.
_BAR = re.compile(r"^(?P<name>.*?)(?:\d{1,3}%\|[^|]*\|\s*)?" + BAR_COUNT)
_VERL_STEP = re.compile(r"(?:^|[\s)])step:(?P<n>\d+) - ")
_LOSS_DICT = re.compile(r"\{['\"]loss['\"]: ")
_GEN_THROUGHPUT = re.compile(r"Avg generation throughput: (?P<rate>[\d.]+) tokens/s")
_FINISHED = re.compile(r"\{['\"]train_runtime['\"]: |\bTraining completed\b")
# Lines that may start or end a failure; the diagnosis decides whether they are one.
_FAILURE_SHAPES = (TRACEBACK, TERMINATE, FATAL_PYTHON, INLINE_EXCEPTION, SIGNAL_RECEIVED, SHELL_SIGNAL, EXIT_STATUS, KILLED_BY, EXITCODE)
# Process ids as logs print them: Ray/vLLM `pid=4121`, torchelastic `(pid: 4121)`, `PID 4121`, py-spy `Process 4121:`.
_PID = re.compile(r"(?<![\w-])(?:pid[=:]\s*|\(pid: |PID |^Process )(?P<pid>\d{2,9})\b")
MAX_PIDS = 64

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """An LRU mapping: a shape or counter not seen for a long while is forgotten, and seeing it
    again counts as new — erring towards "still progressing", never towards a false stall."""

    def __init__(self, limit: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._limit = limit

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._limit:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class Verdict(Enum):
    progress = "progress"
    noise = "noise"
    finished = "finished"


def looks_like_failure(line: str) -> bool:
    text = ANSI.sub("", line)
    return any(pattern.search(text) for pattern in _FAILURE_SHAPES)


def shape(line: str) -> str:
    """The line with everything that changes between two prints of the same message masked."""
    text = REPEATED.sub("", ANSI.sub("", line))
    text = _NUMBERS.sub("#", _HEXISH.sub("#", text))
    return _SPACES.sub(" ", text).strip()


@dataclass
class Judge:
    """Decides, line by line, whether a run moved forward; shared by all files of the run so that
    eight ranks printing the same heartbeat are one shape, not eight."""

    shapes: Bounded[int, bool] = field(default_factory=lambda: Bounded(MAX_SHAPES))
    counters: Bounded[tuple[str, ...], int] = field(default_factory=lambda: Bounded(MAX_COUNTERS))

    def counter(self, line: str, where: str) -> bool | None:
        """True/False when the line carries a step counter (advanced or not), None when it has none.
        Idempotent, so it may be asked about an unfinished line and again once it is complete."""
        text = ANSI.sub("", line)
        stage = STAGE_MARKER.search(text)
        if stage:
            key = (where, "stage", stage["stage"], stage["step"] or "")
            new = self.counters.get(key) is None
            self.counters.put(key, 1)
            return new
        verl = _VERL_STEP.search(text)
        if verl:
            return self._advance((where, "verl"), int(verl["n"]))
        bar = _BAR.search(text)
        if bar:
            name = _SPACES.sub(" ", bar["name"]).strip()
            return self._advance((where, "bar", name, bar["m"]), int(bar["n"]))
        return None

    def _advance(self, key: tuple[str, ...], n: int) -> bool:
        last = self.counters.get(key)
        # The last value, not the maximum: a bar that restarts (one per rollout) advances again.
        self.counters.put(key, n)
        return last is None or n > last

    def judge(self, line: str, where: str) -> Verdict:
        if _FINISHED.search(line):
            return Verdict.finished
        if _LOSS_DICT.search(line):
            return Verdict.progress
        moved = self.counter(line, where)
        if moved is not None:
            return Verdict.progress if moved else Verdict.noise
        rate = _GEN_THROUGHPUT.search(line)
        if rate and float(rate["rate"]) > 0:
            return Verdict.progress
        key = hash(shape(line)[:1024])
        if self.shapes.get(key):
            return Verdict.noise
        self.shapes.put(key, True)
        return Verdict.progress


@dataclass
class Tail:
    """One followed file: where we are in it and the unfinished last line."""

    path: str
    ident: tuple[int, int]
    offset: int = 0
    partial: bytes = b""
    skip_to_eol: bool = False
    binary: bool | None = None


@dataclass
class PollResult:
    grew: bool = False
    progress: str | None = None  # where the last progress was seen, for the status line
    noise: int = 0
    finished: str | None = None
    failure: str | None = None  # the first new line shaped like a failure
    new_files: list[str] = field(default_factory=list)


def _split_lines(data: bytes) -> list[bytes]:
    # tqdm redraws with bare carriage returns; each redraw is a line of its own.
    return re.split(rb"\r\n|\r|\n", data)


class Watcher:
    """Follows files and folders; `poll()` reads what is new and says whether the run progressed."""

    def __init__(self, paths: Sequence[str], judge: Judge | None = None) -> None:
        self.paths = list(paths)
        self.judge = judge or Judge()
        self.tails: dict[str, Tail] = {}
        self.pids: dict[int, None] = {}  # the pids the logs name, first seen first

    def listing(self) -> Iterator[tuple[str, os.stat_result]]:
        """Regular files under the watched paths, never following links to folders."""
        seen: set[str] = set()
        for given in self.paths:
            for path, info in _regular_files(given):
                if path not in seen:
                    seen.add(path)
                    yield path, info

    def any_path_exists(self) -> bool:
        return any(os.path.exists(p) for p in self.paths)

    def poll(self, on_line: Callable[[Verdict, str], None] | None = None) -> PollResult:
        result = PollResult()
        current = dict(self.listing())
        moved_from = {t.ident: t for p, t in self.tails.items() if p not in current or _ident(current[p]) != t.ident}
        tails: dict[str, Tail] = {}
        for path, info in current.items():
            ident = _ident(info)
            tail = self.tails.get(path)
            if tail is None or tail.ident != ident:
                # A rotated file renamed within the run folder keeps its place; a new inode at an
                # old path is a fresh file, read from its start.
                tail = moved_from.pop(ident, None)
                if tail is None:
                    tail = Tail(path, ident)
                    result.new_files.append(path)
                tail.path = path
            if info.st_size < tail.offset:
                tail.offset, tail.partial, tail.skip_to_eol = 0, b"", False
            tails[path] = tail
            self._read(tail, info.st_size, result, on_line)
        self.tails = tails
        return result

    def _read(self, tail: Tail, size: int, result: PollResult, on_line: Callable[[Verdict, str], None] | None) -> None:
        if size <= tail.offset or tail.binary:
            return
        try:
            with open(tail.path, "rb") as handle:
                handle.seek(tail.offset)
                while tail.offset < size:
                    data = handle.read(min(READ_CHUNK, size - tail.offset))
                    if not data:
                        break
                    if tail.binary is None:
                        tail.binary = looks_binary(data[:SNIFF_BYTES])
                        if tail.binary:
                            return
                    tail.offset += len(data)
                    result.grew = True
                    self._feed(tail, data, result, on_line)
        except OSError:
            return  # vanished or unreadable between listing and reading: next poll will tell
        if tail.partial and not tail.skip_to_eol:
            # A bar redraw stays unterminated until the next redraw; its counter is judged now.
            text = tail.partial.decode("utf-8", "replace")
            if self.judge.counter(text, tail.path):
                result.progress = f"{tail.path}: {cut(text.strip(), 120)}"

    def _feed(self, tail: Tail, data: bytes, result: PollResult, on_line: Callable[[Verdict, str], None] | None) -> None:
        pieces = _split_lines(tail.partial + data)
        tail.partial = pieces.pop()
        for piece in pieces:
            if tail.skip_to_eol:
                tail.skip_to_eol = False
                continue
            self._judge_line(tail, piece, result, on_line)
        if len(tail.partial) > MAX_LINE:
            if not tail.skip_to_eol:
                self._judge_line(tail, tail.partial[:MAX_LINE], result, on_line)
            tail.partial, tail.skip_to_eol = b"", True

    def _judge_line(self, tail: Tail, raw: bytes, result: PollResult, on_line: Callable[[Verdict, str], None] | None) -> None:
        line = raw.decode("utf-8", "replace")
        if not line.strip():
            return
        if len(self.pids) < MAX_PIDS and ("pid" in line or "PID" in line or line.startswith("Process ")):
            for match in _PID.finditer(line):
                self.pids.setdefault(int(match["pid"]), None)
        if result.failure is None and looks_like_failure(line):
            result.failure = f"{tail.path}: {line.strip()[:120]}"
        verdict = self.judge.judge(line, tail.path)
        if on_line is not None:
            on_line(verdict, line)
        if verdict is Verdict.finished:
            result.finished = f"{tail.path}: {cut(line.strip(), 120)}"
        elif verdict is Verdict.progress:
            result.progress = f"{tail.path}: {cut(line.strip(), 120)}"
        else:
            result.noise += 1


def _regular_files(given: str) -> list[tuple[str, os.stat_result]]:
    """Regular files at or under one watched path (links to files followed), in path order."""
    try:
        info = os.stat(given)
    except OSError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        return [(given, info)] if stat.S_ISREG(info.st_mode) else []
    found = []
    for folder in folders(given):
        for entry in folder.files:
            try:
                info = os.stat(entry.path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append((entry.path, info))
    # Depth first with every folder's entries in name order, folders and files alike.
    found.sort(key=lambda item: item[0][len(given) :].split(os.sep))
    return found


def _ident(info: os.stat_result) -> tuple[int, int]:
    return (info.st_dev, info.st_ino)


def on_stall_environment(
    paths: Sequence[str], files: Sequence[str], pids: Sequence[int], diagnosis: str, output: str, stalled_seconds: float
) -> dict[str, str]:
    """What the on-stall command finds in its environment, beside the watcher's own."""
    env = {
        "RLTRIAGE_PIDS": " ".join(str(p) for p in pids),
        "RLTRIAGE_FILES": "\n".join(files),
        "RLTRIAGE_PATHS": "\n".join(paths),
        "RLTRIAGE_DIAGNOSIS": diagnosis,
        "RLTRIAGE_ON_STALL_OUTPUT": output,
        "RLTRIAGE_STALLED_SECONDS": f"{stalled_seconds:.0f}",
    }
    if pids:
        env["PID"] = str(pids[0])
    return env


def on_stall_target(first_path: str) -> str:
    """Where the on-stall command's output goes: the run folder, or a temporary file."""
    if os.path.isdir(first_path):
        return os.path.join(first_path, ON_STALL_FILE)
    fd, target = tempfile.mkstemp(prefix="rltriage-on-stall-", suffix=".txt")
    os.close(fd)
    return target


def run_on_stall(command: str, first_path: str, timeout: float, env: dict[str, str] | None = None, target: str | None = None) -> str:
    """Run the on-stall command with its output appended to a file the diagnosis will read."""
    target = target or on_stall_target(first_path)
    stamp = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    with open(target, "ab") as out:
        out.write(f"# rltriage watch --on-stall at {stamp}\n".encode())
        out.flush()
        # Its own session, so a timeout can stop the whole pipeline the shell started, not just the shell.
        proc = subprocess.Popen(
            command, shell=True, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        try:
            code = proc.wait(timeout=timeout)
            note = f"# on-stall command exited {code}\n"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
            note = f"# on-stall command timed out after {timeout:g} s and was killed\n"
        out.write(note.encode())
    return target


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    try:  # a child of ours that exited and was not reaped yet is a zombie: gone
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _failed(analysis: Analysis) -> bool:
    """The diagnosis confirms the run failed: a failure, or a crash / out-of-memory cause."""
    diagnosis = analysis.diagnosis
    return bool(diagnosis.failures) or (diagnosis.symptom in (Symptom.crash, Symptom.oom) and bool(diagnosis.causes))


@dataclass
class WatchOutcome:
    """How a watch ended: the run finished or its paths went away (no analysis), or it stalled,
    crashed or exited and was diagnosed (`analysis`, `ending` "stalled", "crashed" or "exited")."""

    analysis: Analysis | None = None
    ending: str = "finished"

    @property
    def stalled(self) -> bool:
        return self.ending == "stalled"


def watch(
    paths: Sequence[str],
    *,
    stall_after: float,
    poll: float,
    on_stall: str | None,
    on_stall_timeout: float,
    rules_dirs: Sequence[str],
    pids: Sequence[int] = (),
    status: Callable[[str], None] = lambda message: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    redacting: bool = True,
) -> WatchOutcome:
    """Follow the run until it finishes, stalls, crashes or (with `pids`) exits; on a stall, run
    `on_stall` and diagnose; on a crash or exit, diagnose at once.

    What happens along the way goes to `status`, one message at a time, redacted (unless
    `redacting` is off) and printable; nothing is printed.
    """

    def say(message: str) -> None:
        status(printable(redact(message) if redacting else message))

    for given in paths:
        if not os.path.exists(given):
            raise InputError(f"{given}: no such file or folder")
    # Loaded now, so a broken rule pack fails at once instead of after the first stall.
    kb = load_knowledge_base(rules_dirs)
    watcher = Watcher(paths)
    first = watcher.poll()  # learn what is already there; it is history, not progress
    if first.finished:
        say(f"run already finished: {first.finished}")
        return WatchOutcome()
    # A run that already died is diagnosed at the next poll, not waited on.
    suspect: str | None = first.failure
    suspect_polls = 0
    recheck_after = 0.0  # after a failure-looking line the diagnosis did not confirm, a pause
    started = last_progress = last_activity = clock()
    last_where = "nothing yet (clock started with the watcher)"
    noise = 0
    say(
        f"watching {len(watcher.tails)} file(s) under {', '.join(paths)}; "
        f"stalled after {stall_after:g} s without progress, polling every {poll:g} s"
        + (f"; process(es) {' '.join(map(str, pids))}" if pids else "")
    )
    while True:
        sleep(poll)
        if not watcher.any_path_exists():
            say("every watched path is gone; stopping")
            return WatchOutcome()
        result = watcher.poll()
        now = clock()
        for path in result.new_files:
            say(f"following new file {path}")
        if result.finished:
            say(f"run finished: {result.finished}")
            return WatchOutcome()
        if suspect is None and result.failure is not None and now >= recheck_after:
            suspect, suspect_polls = result.failure, 0
        elif suspect is not None:
            suspect_polls += 1
            # Diagnose once the lines after the failure have arrived (a poll with no new failure
            # line), or after a few polls of a failure that keeps printing.
            if result.failure is None or suspect_polls >= 3:
                analysis = analyse(list(paths), rules_dirs=rules_dirs, kb=kb, redact=redacting)
                if _failed(analysis):
                    say(f"CRASHED — {suspect}; diagnosing {len(watcher.tails)} file(s)")
                    return WatchOutcome(analysis, "crashed")
                say(f"a failure-looking line the diagnosis does not confirm; watching on ({suspect})")
                suspect, recheck_after = None, now + max(10 * poll, 30.0)
        if pids and not any(_alive(pid) for pid in pids):
            say(f"EXITED — process(es) {' '.join(map(str, pids))} ended without the run finishing; diagnosing {len(watcher.tails)} file(s)")
            return WatchOutcome(analyse(list(paths), rules_dirs=rules_dirs, kb=kb, redact=redacting), "exited")
        if result.grew:
            last_activity = now
        if result.progress:
            last_progress, last_where, noise = now, result.progress, 0
        noise += result.noise
        if now - last_progress >= stall_after:
            break
    idle = now - last_progress
    quiet = f"{noise} repeated line(s) since, last write {now - last_activity:.0f} s ago" if noise else "no new lines since"
    since = "since the watcher started" if last_progress == started else f"last progress: {last_where}"
    say(f"STALLED — no progress for {idle:.0f} s ({since}; {quiet}); diagnosing {len(watcher.tails)} file(s)")
    targets = list(paths)
    if on_stall:
        before = analyse(list(paths), rules_dirs=rules_dirs, kb=kb, redact=redacting)
        fd, diagnosis_path = tempfile.mkstemp(prefix="rltriage-diagnosis-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(format_diagnosis(before.diagnosis, "json", kb))
        output = on_stall_target(paths[0])
        env = on_stall_environment(paths, list(watcher.tails), [*pids, *(p for p in watcher.pids if p not in pids)], diagnosis_path, output, idle)
        say(f"running the on-stall command (PID={env.get('PID', '')}, RLTRIAGE_DIAGNOSIS={diagnosis_path})")
        out = run_on_stall(on_stall, paths[0], on_stall_timeout, env=env, target=output)
        say(f"on-stall command output appended to {out}")
        if not os.path.isdir(paths[0]):
            targets.append(out)  # inside the folder it is found like any other file
    return WatchOutcome(analyse(targets, rules_dirs=rules_dirs, kb=kb, redact=redacting), "stalled")
