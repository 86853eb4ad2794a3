"""`rltriage batch`: diagnose every run under a folder (or in a list), one JSON line per run.

What is a run: a folder that directly holds log files (*.log, *.txt, *.out, *.err, also
compressed: *.log.gz …) together with everything below it, or an archive of a run (*.tar,
*.tar.gz, *.tgz, *.tar.zst, *.zip, …) lying in a folder that holds no log files itself. Folders
with neither are searched deeper. Hidden entries and symbolic links to folders are not searched.

The output is resumable: lines are appended in sorted run order and forced to disk one by one, so
an interrupted batch leaves complete lines plus at most one partial line; the next batch with the
same output keeps the complete lines, drops the partial one and diagnoses only the runs left. An
uninterrupted and a resumed batch write the same bytes.

With `html` (`--html DIR`) each run also gets a self-contained HTML page in DIR, written by the
worker that diagnosed it (`page_name` names it), and DIR/index.html lists every run of the batch
(resumed ones too) with its primary bucket, top cause and boundary, sortable in the browser.

With `--executor ray` each run is one Ray task calling `rltriage.diagnose` on a worker: the run's
path, as written here (relative to this working directory, which the task changes to), must be
readable on every worker, e.g. on a shared filesystem, and rltriage must be installed there.
"""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing
import os
import re
import signal
import stat
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any

from pydantic import ValidationError

from ..base.contract import Diagnosis
from ..base.errors import InputError, KnowledgeBaseError
from ..base.text import printable
from ..inputs.filetypes import is_log, is_run_archive
from ..inputs.walk import folders
from ..kb.knowledge import KnowledgeBase
from ..kb.load import load_knowledge_base
from ..pipeline import progress
from ..pipeline.html import index_entry, index_page, render_index
from ..pipeline.redact import redact as redact_text
from ..pipeline.redact import redact_path
from ..pipeline.render import format_diagnosis
from ..pipeline.run import Analysis, analyse

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zstd")
SHOWN = 20  # runs listed by name in the summary; the JSONL has them all
MAX_RESULT_LINE = 64 << 20  # a results line longer than this was not written by a batch


@dataclass(frozen=True)
class Run:
    path: str
    bytes: int = 0
    files: int = 0


class Interrupted(Exception):
    """SIGTERM, turned into an exception so workers are stopped and the output stays whole."""


# --- finding runs ---------------------------------------------------------------------------


def _size_of_tree(folder: str) -> tuple[int, int]:
    """Bytes and files below a folder, for the progress bar; unreadable parts count nothing."""
    total = files = 0
    for found in folders(folder):
        for entry in found.files:
            try:
                if entry.is_file():
                    total += entry.stat().st_size
                    files += 1
            except OSError:
                continue
    return total, files

def _measure(path: str) -> Run:
    try:
        if os.path.isdir(path):
            size, files = _size_of_tree(path)
            return Run(path, size, files)
        return Run(path, os.stat(path).st_size, 1)
    except OSError:
        return Run(path)  # diagnosing it will say what is wrong


def find_runs(root: str, exclude: Iterable[str] = ()) -> list[Run]:
    """The runs under `root`, sorted by path; `exclude` holds real paths never taken as inputs."""
    skip = {os.path.realpath(p) for p in exclude}
    runs: list[Run] = []

    def unreadable(path: str, exc: OSError, listing: bool) -> None:
        if listing:
            runs.append(Run(path))  # diagnosing it reports the problem as this run's error

    def wanted(path: str) -> bool:
        return not os.path.basename(path).startswith(".") and not (skip and os.path.realpath(path) in skip)

    for folder in folders(root, unreadable):
        logs: list[os.DirEntry[str]] = []
        archives: list[os.DirEntry[str]] = []
        for entry in folder.files:
            if not wanted(entry.path):
                continue
            try:
                if entry.is_file():
                    if is_run_archive(entry.name):
                        archives.append(entry)
                    elif is_log(entry.name):
                        logs.append(entry)
            except OSError:
                continue
        if logs:
            runs.append(_measure(folder.path))
            folder.subfolders.clear()
            continue
        for entry in archives:
            runs.append(_measure(entry.path))
        folder.subfolders[:] = [path for path in folder.subfolders if wanted(path)]
    return sorted(runs, key=lambda r: r.path)

def read_list(path: str) -> list[Run]:
    """Runs named one per line; blank lines and `#` comments skipped; relative to the cwd."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            names = [line.rstrip("\r\n") for line in handle]
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc
    wanted = {n for n in names if n.strip() and not n.lstrip().startswith("#")}
    return [_measure(name) for name in sorted(wanted)]


def runs_of(root_or_list: str, exclude: Iterable[str] = ()) -> list[Run]:
    if not os.path.exists(root_or_list):
        raise InputError(f"{root_or_list}: no such file or folder")
    if os.path.isdir(root_or_list):
        return find_runs(root_or_list, exclude)
    if is_run_archive(os.path.basename(root_or_list)):
        return [_measure(root_or_list)]  # one archive is one run, not a list of runs
    return read_list(root_or_list)


# --- diagnosing one run ---------------------------------------------------------------------


def shown_run(run: str, redact: bool) -> str:
    """A run's path as its JSON line names it: redacted like everything else, printable."""
    return printable(redact_path(run) if redact else run)


def shown_text(text: str, redact: bool) -> str:
    """An error message as a JSON line carries it: redacted, printable."""
    return printable(redact_text(text) if redact else text)


def page_name(run: str, redact: bool = True) -> str:
    """The file name of a run's page in a batch's html folder: readable, and unique per run."""
    shown = redact_text(run) if redact else run
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", shown).strip("._")[-80:] or "run"
    digest = hashlib.sha256(run.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{base}-{digest}.html"


def _replace(path: str, text: str) -> None:
    """Write beside the target and rename: a stopped batch never leaves half a page."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".page.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # what open() would give a new page, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_page(folder: str, run: str, analysis: Analysis, redact: bool) -> str:
    """A run's html page (timeline, excerpts and all) in `folder`; returns its path."""
    path = os.path.join(folder, page_name(run, redact))
    _replace(path, format_diagnosis(analysis.diagnosis, "html", analysis.kb, details=analysis.details))
    return path


def write_index(folder: str, runs: Sequence[str], records: dict[str, dict[str, Any]], kb: KnowledgeBase, redact: bool, title: str) -> str:
    """`folder`/index.html: bucket counts and a sortable table of the runs, each linked to its page."""
    entries = []
    for run in runs:
        record = records.get(shown_run(run, redact))
        if record is None:
            continue
        name = page_name(run, redact)
        entry = index_entry(record, name if os.path.exists(os.path.join(folder, name)) else None)
        entries.append(entry)
    path = os.path.join(folder, "index.html")
    _replace(path, render_index(kb, index_page(entries), redact_text(title) if redact else title))
    return path


def line_for(run: str, rules_dirs: Sequence[str], redact: bool, kb: KnowledgeBase | None = None, html: str | None = None) -> str:
    """The JSON line of one run: its diagnosis with `run` added, or `run` and `error`.

    With `kb` the run is diagnosed with that knowledge base (a batch pins the one it loaded, so
    rule files edited during a batch cannot make its runs disagree); without, `rules_dirs` is loaded.
    With `html`, the run's page is written into that folder.
    """
    record: dict[str, Any]
    try:
        analysis = analyse([run], rules_dirs=rules_dirs, kb=kb, redact=redact)
        if html is not None:
            write_page(html, run, analysis, redact)
        record = {"run": shown_run(run, redact), **analysis.diagnosis.model_dump(mode="json")}
    except KnowledgeBaseError:
        raise  # not this run's fault: every run would fail the same way
    except InputError as exc:
        record = {"run": shown_run(run, redact), "error": shown_text(str(exc), redact)}
    except Exception as exc:  # noqa: BLE001 - one odd run must not stop a batch of thousands
        record = {"run": shown_run(run, redact), "error": shown_text(f"{type(exc).__name__}: {exc}", redact)}
    # ASCII keeps undecodable file names (surrogate escapes) writable and the bytes stable.
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"))

# The knowledge base of a local worker process: the batch's own when the worker is forked (it is
# inherited, never pickled), loaded once by a spawned worker.
_worker_kb: KnowledgeBase | None = None


def _init_worker(kb: KnowledgeBase | None, rules_dirs: Sequence[str]) -> None:
    # The parent handles Ctrl-C for everyone.
    global _worker_kb
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    progress.silence()
    _worker_kb = kb if kb is not None else load_knowledge_base(rules_dirs)


def _worker_line(run: str, rules_dirs: Sequence[str], redact: bool, html: str | None = None) -> str:
    return line_for(run, rules_dirs, redact, _worker_kb, html)

def _local_lines(
    runs: Sequence[str], jobs: int, rules_dirs: Sequence[str], redact: bool, kb: KnowledgeBase, html: str | None = None
) -> Generator[str, None, None]:
    if jobs <= 1 or len(runs) < 2:
        for run in runs:
            yield line_for(run, rules_dirs, redact, kb, html)
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context(method),
        initializer=_init_worker,
        initargs=(kb if method == "fork" else None, tuple(rules_dirs)),
    )
    try:
        # A bounded window of runs in flight, collected in submission order: output order is
        # the sorted run order whatever finishes first, and memory stays flat for 100,000 runs.
        pending = iter(runs)
        window: deque[Future[str]] = deque(pool.submit(_worker_line, r, rules_dirs, redact, html) for r in islice(pending, jobs * 8))
        while window:
            line = window.popleft().result()
            following = next(pending, None)
            if following is not None:
                window.append(pool.submit(_worker_line, following, rules_dirs, redact, html))
            yield line
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray_line(run: str, rules_dirs: Sequence[str], redact: bool, cwd: str, html: str | None = None) -> str:
    """One Ray task: the run's path is as the driver wrote it, relative to the driver's cwd."""
    try:
        os.chdir(cwd)
    except OSError as exc:
        if not os.path.isabs(run):
            message = f"{cwd}: driver's working directory not readable on this Ray worker: {exc.strerror or exc}"
            return json.dumps({"run": shown_run(run, redact), "error": shown_text(message, redact)}, ensure_ascii=True, separators=(",", ":"))
    progress.silence()
    return line_for(run, rules_dirs, redact, html=html)


def _ray_lines(runs: Sequence[str], rules_dirs: Sequence[str], redact: bool, html: str | None = None) -> Generator[str, None, None]:
    try:
        import ray
    except ImportError as exc:
        raise InputError("--executor ray needs Ray: pip install 'rltriage[ray]'") from exc
    import logging

    started = not ray.is_initialized()
    if started:
        # Worker output must not reach the driver's stdout: it may be the JSONL.
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False, logging_level=logging.WARNING)
    try:
        task = ray.remote(num_cpus=1)(_ray_line)
        cwd = os.getcwd()
        in_flight = max(16, 4 * int(ray.cluster_resources().get("CPU", 1)))
        pending = iter(runs)
        window: deque[tuple[str, Any]] = deque((r, task.remote(r, tuple(rules_dirs), redact, cwd, html)) for r in islice(pending, in_flight))
        while window:
            run, ref = window.popleft()
            try:
                line = ray.get(ref)
            except ray.exceptions.RayError as exc:  # the worker died (OOM, node lost …)
                message = f"ray: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                line = json.dumps({"run": shown_run(run, redact), "error": shown_text(message, redact)}, ensure_ascii=True, separators=(",", ":"))
            following = next(pending, None)
            if following is not None:
                window.append((following, task.remote(following, tuple(rules_dirs), redact, cwd, html)))
            yield line
    finally:
        if started:
            ray.shutdown()


# --- the output file ------------------------------------------------------------------------


class Output:
    """Where lines go: a results file appended to line by line and fsync'ed, or `write_line`
    (the command's stdout)."""

    def __init__(self, path: str | None, write_line: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._write_line = write_line
        self.done: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self._fd: int | None = None
        if path is not None:
            self._open(path)

    def _open(self, path: str) -> None:
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            # A FIFO or device would block the resume read, or take results nobody can resume from.
            raise InputError(f"{path}: not a regular file; batch results go to a regular file it can resume from")
        if os.path.islink(path) and not os.path.exists(path):
            raise InputError(f"{path}: a broken symbolic link (not followed)")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(f"{path}: {exc.strerror or exc}") from exc
        try:
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise InputError(f"{path}: another batch is writing to this file") from exc
                raise
            self._resume(fd, path)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _resume(self, fd: int, path: str) -> None:
        # Read line by line (a results file of 100,000 runs is not held whole), and only what the
        # summary needs of each line is kept.
        end = 0  # offset just past the last complete line
        number = 0
        tail = b""
        with os.fdopen(os.dup(fd), "rb") as handle:
            while True:
                raw = handle.readline(MAX_RESULT_LINE + 1)
                if not raw:
                    break
                if not raw.endswith(b"\n"):
                    if len(raw) > MAX_RESULT_LINE:
                        raise InputError(f"{path}:{number + 1}: line longer than {MAX_RESULT_LINE >> 20} MiB is not a batch result line; refusing to write to this file")
                    tail = raw
                    break
                number += 1
                end += len(raw)
                if not raw.strip():
                    continue
                record = _record(raw)
                if record is None:
                    # Not something a batch wrote: appending to (or cutting) it could destroy data.
                    raise InputError(f"{path}:{number}: not a batch result line; refusing to write to this file")
                self.done.setdefault(record["run"], record)
        if not tail:
            return
        record = _record(tail)
        if record is not None:  # a whole record whose newline is missing: keep it
            self.done.setdefault(record["run"], record)
            os.lseek(fd, 0, os.SEEK_END)
            self._write(fd, b"\n")
            return
        if not number and not tail.startswith(b"{"):
            raise InputError(f"{path}: not a batch results file; refusing to write to this file")
        # The line being written when the last batch was stopped: its run is diagnosed again.
        os.ftruncate(fd, end)
        os.fsync(fd)
        self.notes.append(f"dropped a partial last line of {len(tail)} bytes from {path}")

    @staticmethod
    def _write(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def write(self, line: str) -> None:
        if self._fd is None:
            if self._write_line is not None:
                self._write_line(line)
            return
        os.lseek(self._fd, 0, os.SEEK_END)
        # One write call per line: a kill leaves a prefix of it at worst, never a mix of two.
        self._write(self._fd, (line + "\n").encode("ascii"))
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _record(raw: bytes) -> dict[str, Any] | None:
    """What the summary needs of a results line, or None when the line is not one a batch writes:
    `run` and `error`, or `run` and a diagnosis that validates against the output contract."""
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("run"), str):
        return None
    if "error" in record:
        if set(record) != {"run", "error"} or not isinstance(record["error"], str):
            return None
        return record
    try:
        Diagnosis.model_validate({k: v for k, v in record.items() if k != "run"})
    except (ValidationError, RecursionError):
        return None
    return summary_view(record)


def summary_view(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a results line the summary reads."""
    if "error" in record:
        return {"run": record["run"], "error": record["error"]}
    causes = record.get("causes") or []
    top = {k: causes[0].get(k) for k in ("rule", "title", "score")} if causes else None
    boundary = record.get("boundary") or {}
    return {
        "run": record["run"],
        "primary_bucket": record.get("primary_bucket"),
        "symptom": record.get("symptom"),
        "boundary": {k: boundary.get(k) for k in ("last_completed", "first_missing")},
        "causes": [top] if top else [],
    }


# --- the summary ----------------------------------------------------------------------------


def summary(runs: Sequence[str], records: dict[str, dict[str, Any]], resumed: int) -> str:
    buckets: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    undiagnosed: list[str] = []
    errors: list[tuple[str, str]] = []
    for run in runs:
        record = records.get(run)
        if record is None:
            continue
        if "error" in record:
            errors.append((run, str(record["error"])))
            continue
        bucket = record.get("primary_bucket")
        buckets[bucket or "(none)"] += 1
        if bucket is None:
            undiagnosed.append(run)
        first = (record.get("causes") or [{}])[0].get("rule")
        if first:
            causes[first] += 1
    diagnosed = sum(buckets.values())
    out = [f"rltriage batch: {len(runs)} runs, {diagnosed} diagnosed, {len(errors)} errors" + (f" ({resumed} from a previous batch)" if resumed else "")]
    if buckets:
        width = max(len(b) for b in buckets)
        out.append("\nruns per primary bucket")
        out += [f"  {b:<{width}}  {n:>6}" for b, n in sorted(buckets.items(), key=lambda kv: (-kv[1], kv[0]))]
    if causes:
        top = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
        width = max(len(c) for c, _ in top[:SHOWN])
        out.append("\ntop causes (first-ranked cause of each run)")
        out += [f"  {c:<{width}}  {n:>6}" for c, n in top[:SHOWN]]
        if len(top) > SHOWN:
            out.append(f"  … and {len(top) - SHOWN} more")
    for title, names in (
        (f"runs with no diagnosis (primary_bucket null): {len(undiagnosed)}", undiagnosed),
        (f"runs that could not be diagnosed: {len(errors)}", [f"{run}: {message}" for run, message in errors]),
    ):
        if names:
            out.append("\n" + title)
            out += [f"  {n}" for n in names[:SHOWN]]
            if len(names) > SHOWN:
                out.append(f"  … and {len(names) - SHOWN} more (all are in the JSON lines)")
    return "\n".join(out) + "\n"


# --- the batch ------------------------------------------------------------------------------


def run_batch(
    root_or_list: str,
    *,
    jobs: int = 1,
    output: str | None = None,
    executor: str = "local",
    rules_dirs: Sequence[str] = (),
    redact: bool = True,
    write_line: Callable[[str], None] | None = None,
    notice: Callable[[str], None] = lambda message: None,
    html: str | None = None,
) -> str:
    """The batch itself; returns the summary. Lines go to `output`, or to `write_line` without one;
    notes on the output file and warnings go to `notice`; with `html`, a page per run and an index
    go to that folder. Raises InputError / KnowledgeBaseError like the rest of the library."""
    # A broken rule pack fails once, before any run; forked workers inherit the loaded one.
    kb = load_knowledge_base(rules_dirs)
    if html is not None:
        html = os.path.abspath(html)  # Ray workers and forked workers alike write here
        try:
            os.makedirs(html, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{html}: cannot create the html folder: {exc.strerror or exc}") from exc
    runs = runs_of(root_or_list, exclude=[p for p in (output, html) if p])
    out = Output(output, write_line)
    try:
        resumed, records = _write_all(runs, out, executor, jobs, rules_dirs, redact, root_or_list, kb, notice, html)
    finally:
        out.close()
    if html is not None:
        index = write_index(html, [r.path for r in runs], records, kb, redact, f"rltriage batch — {root_or_list}")
        notice(f"html: one page per run, and {index}")
    return summary([shown_run(r.path, redact) for r in runs], records, resumed)

def _write_all(
    runs: list[Run],
    out: Output,
    executor: str,
    jobs: int,
    rules_dirs: Sequence[str],
    redact: bool,
    root_or_list: str,
    kb: KnowledgeBase,
    notice: Callable[[str], None],
    html: str | None = None,
) -> tuple[int, dict[str, dict[str, Any]]]:
    for note in out.notes:
        notice(note)
    if not runs:
        notice(f"warning: {root_or_list}: no runs found")
    # Lines name runs as they are shown (redacted), so resuming matches them by that name.
    shown = {r.path: shown_run(r.path, redact) for r in runs}
    resumed = sum(1 for r in runs if shown[r.path] in out.done)
    todo = [r for r in runs if shown[r.path] not in out.done]
    records = dict(out.done)
    bar = progress.Progress(sum(r.bytes for r in todo), sum(r.files for r in todo), len(todo))
    try:
        paths = [r.path for r in todo]
        lines = _ray_lines(paths, rules_dirs, redact, html) if executor == "ray" else _local_lines(paths, jobs, rules_dirs, redact, kb, html)
        try:
            for run, line in zip(todo, lines, strict=True):
                out.write(line)
                records[shown[run.path]] = summary_view(json.loads(line))
                bar.advance(run.bytes, run.files, 1)
        finally:
            lines.close()  # stops the workers now, not whenever the generator is collected
    finally:
        bar.close()
    return resumed, records
