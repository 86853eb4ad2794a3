"""`rltriage batch`: diagnose every run under a folder (or in a list), one JSON line per run.

What is a run: a folder that directly holds log files (*.log, *.txt, *.out, *.err, also
compressed: *.log.gz …) together with everything below it, or an archive of a run (*.tar,
*.tar.gz, *.tgz, *.tar.zst, *.zip, …) lying in a folder that holds no log files itself. Folders
with neither are searched deeper. Hidden entries and symbolic links to folders are not searched.

The output is resumable: lines are appended in sorted run order and forced to disk one by one, so
an interrupted batch leaves complete lines plus at most one partial line; the next batch with the
same output keeps the complete lines, drops the partial one and diagnoses only the runs left. An
uninterrupted and a resumed batch write the same bytes.

With `--executor ray` each run is one Ray task calling `rltriage.diagnose` on a worker: the run's
path, as written here (relative to this working directory, which the task changes to), must be
readable on every worker, e.g. on a shared filesystem, and rltriage must be installed there.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
from collections import Counter, deque
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from types import FrameType
from typing import Any, TextIO

import click

from . import progress
from .commands import EXIT_OK, report_errors
from .errors import InputError, KnowledgeBaseError
from .load import KnowledgeBase, load_knowledge_base
from .pipeline import analyse, diagnose
from .redact import redact as redact_text

EXIT_INTERRUPTED = 130

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zstd")
RUN_ARCHIVES = (
    ".tar", ".tar.gz", ".tgz", ".taz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz",
    ".tar.zst", ".tar.zstd", ".tzst", ".zip",
)  # fmt: skip
SHOWN = 20  # runs listed by name in the summary; the JSONL has them all


@dataclass(frozen=True)
class Run:
    path: str
    bytes: int = 0
    files: int = 0


class Interrupted(Exception):
    """SIGTERM, turned into an exception so workers are stopped and the output stays whole."""


# --- finding runs ---------------------------------------------------------------------------


def is_log(name: str) -> bool:
    lowered = name.lower()
    for suffix in COMPRESSION:
        if lowered.endswith(suffix):
            lowered = lowered[: -len(suffix)]
            break
    return lowered.endswith(LOG_SUFFIXES)


def is_run_archive(name: str) -> bool:
    return name.lower().endswith(RUN_ARCHIVES)


def _size_of_tree(folder: str) -> tuple[int, int]:
    """Bytes and files below a folder, for the progress bar; unreadable parts count nothing."""
    total = files = 0
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as listing:
                for entry in listing:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file():
                            total += entry.stat().st_size
                            files += 1
                    except OSError:
                        continue
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
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            runs.append(Run(folder))  # diagnosing it reports the problem as this run's error
            continue
        logs: list[os.DirEntry[str]] = []
        archives: list[os.DirEntry[str]] = []
        subfolders: list[str] = []
        for entry in entries:
            if entry.name.startswith(".") or (skip and os.path.realpath(entry.path) in skip):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append(entry.path)
                elif entry.is_file():
                    if is_run_archive(entry.name):
                        archives.append(entry)
                    elif is_log(entry.name):
                        logs.append(entry)
            except OSError:
                continue
        if logs:
            runs.append(_measure(folder))
            continue
        for entry in archives:
            runs.append(_measure(entry.path))
        stack.extend(subfolders)
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


# The knowledge base of this process for the whole batch: loaded once per worker, and pinned,
# so rule files edited during a batch cannot make its runs disagree.
_kb: KnowledgeBase | None = None


def line_for(run: str, rules_dirs: Sequence[str], redact: bool) -> str:
    """The JSON line of one run: its diagnosis with `run` added, or `run` and `error`."""
    record: dict[str, Any]
    try:
        if _kb is not None:
            diagnosis = analyse([run], kb=_kb, redact=redact).diagnosis
        else:
            diagnosis = diagnose([run], rules_dirs=rules_dirs, redact=redact)
        record = {"run": run, **diagnosis.model_dump(mode="json")}
    except KnowledgeBaseError:
        raise  # not this run's fault: every run would fail the same way
    except InputError as exc:
        record = {"run": run, "error": redact_text(str(exc)) if redact else str(exc)}
    except Exception as exc:  # noqa: BLE001 - one odd run must not stop a batch of thousands
        message = f"{type(exc).__name__}: {exc}"
        record = {"run": run, "error": redact_text(message) if redact else message}
    # ASCII keeps undecodable file names (surrogate escapes) writable and the bytes stable.
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"))


def _init_worker(rules_dirs: Sequence[str]) -> None:
    # The parent handles Ctrl-C for everyone; a forked worker already has the knowledge base
    # (inherited `_kb`), a spawned one loads it here, once.
    global _kb
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    progress.silence()
    if _kb is None:
        _kb = load_knowledge_base(rules_dirs)


def _local_lines(runs: Sequence[str], jobs: int, rules_dirs: Sequence[str], redact: bool) -> Generator[str, None, None]:
    if jobs <= 1 or len(runs) < 2:
        for run in runs:
            yield line_for(run, rules_dirs, redact)
        return
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context(method), initializer=_init_worker, initargs=(tuple(rules_dirs),)
    )
    try:
        # A bounded window of runs in flight, collected in submission order: output order is
        # the sorted run order whatever finishes first, and memory stays flat for 100,000 runs.
        pending = iter(runs)
        window: deque[Future[str]] = deque(pool.submit(line_for, r, rules_dirs, redact) for r in islice(pending, jobs * 8))
        while window:
            line = window.popleft().result()
            following = next(pending, None)
            if following is not None:
                window.append(pool.submit(line_for, following, rules_dirs, redact))
            yield line
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray_line(run: str, rules_dirs: Sequence[str], redact: bool, cwd: str) -> str:
    """One Ray task: the run's path is as the driver wrote it, relative to the driver's cwd."""
    try:
        os.chdir(cwd)
    except OSError as exc:
        if not os.path.isabs(run):
            message = f"{cwd}: driver's working directory not readable on this Ray worker: {exc.strerror or exc}"
            return json.dumps({"run": run, "error": message}, ensure_ascii=True, separators=(",", ":"))
    progress.silence()
    return line_for(run, rules_dirs, redact)


def _ray_lines(runs: Sequence[str], rules_dirs: Sequence[str], redact: bool) -> Generator[str, None, None]:
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
        window: deque[tuple[str, Any]] = deque((r, task.remote(r, tuple(rules_dirs), redact, cwd)) for r in islice(pending, in_flight))
        while window:
            run, ref = window.popleft()
            try:
                line = ray.get(ref)
            except ray.exceptions.RayError as exc:  # the worker died (OOM, node lost …)
                message = f"ray: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                line = json.dumps({"run": run, "error": redact_text(message) if redact else message}, ensure_ascii=True, separators=(",", ":"))
            following = next(pending, None)
            if following is not None:
                window.append((following, task.remote(following, tuple(rules_dirs), redact, cwd)))
            yield line
    finally:
        if started:
            ray.shutdown()


# --- the output file ------------------------------------------------------------------------


class Output:
    """Where lines go: stdout, or a results file appended to line by line and fsync'ed."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self._fd: int | None = None
        if path is not None:
            self._open(path)

    def _open(self, path: str) -> None:
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
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        lines = data[:end].split(b"\n")[:-1]
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            record = _record(raw)
            if record is None:
                # Not something a batch wrote: appending to (or cutting) it could destroy data.
                raise InputError(f"{path}:{number}: not a batch result line; refusing to write to this file")
            self.done.setdefault(record["run"], record)
        tail = data[end:]
        if not tail:
            return
        record = _record(tail)
        if record is not None:  # a whole record whose newline is missing: keep it
            self.done.setdefault(record["run"], record)
            os.lseek(fd, 0, os.SEEK_END)
            self._write(fd, b"\n")
            return
        if not lines and not tail.startswith(b"{"):
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
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
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
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if isinstance(record, dict) and isinstance(record.get("run"), str):
        return record
    return None


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


# --- the command ----------------------------------------------------------------------------


def run_batch(
    root_or_list: str,
    *,
    jobs: int = 1,
    output: str | None = None,
    executor: str = "local",
    rules_dirs: Sequence[str] = (),
    redact: bool = True,
    summary_to: TextIO | None = None,
) -> int:
    """The batch itself; raises InputError / KnowledgeBaseError like the rest of the library."""
    global _kb
    # A broken rule pack fails once, before any run; forked workers inherit the loaded one.
    kb = load_knowledge_base(rules_dirs)
    _kb = kb if executor == "local" else None  # Ray workers load their own, through diagnose
    try:
        runs = runs_of(root_or_list, exclude=[output] if output else [])
        out = Output(output)
        try:
            resumed, records = _write_all(runs, out, executor, jobs, rules_dirs, redact, root_or_list)
        finally:
            out.close()
    finally:
        _kb = None
    stream = summary_to or (sys.stdout if output else sys.stderr)
    stream.write(summary([r.path for r in runs], records, resumed))
    stream.flush()
    return EXIT_OK


def _write_all(
    runs: list[Run], out: Output, executor: str, jobs: int, rules_dirs: Sequence[str], redact: bool, root_or_list: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    for note in out.notes:
        click.echo(f"rltriage: {note}", err=True)
    if not runs:
        click.echo(f"rltriage: warning: {root_or_list}: no runs found", err=True)
    resumed = sum(1 for r in runs if r.path in out.done)
    todo = [r for r in runs if r.path not in out.done]
    records = dict(out.done)
    bar = progress.Progress(sum(r.bytes for r in todo), sum(r.files for r in todo), len(todo))
    try:
        paths = [r.path for r in todo]
        lines = _ray_lines(paths, rules_dirs, redact) if executor == "ray" else _local_lines(paths, jobs, rules_dirs, redact)
        try:
            for run, line in zip(todo, lines, strict=True):
                out.write(line)
                records[run.path] = json.loads(line)
                bar.advance(run.bytes, run.files, 1)
        finally:
            lines.close()  # stops the workers now, not whenever the generator is collected
    finally:
        bar.close()
    return resumed, records


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


@click.command("batch")
@click.argument("root_or_list", type=click.Path())
@click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True, help="Local worker processes.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Append JSON lines here; rerun to resume.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Where runs are diagnosed.")
@click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
@click.option("--no-redact", is_flag=True, help="Keep tokens, keys and passwords in the output.")
def batch_command(root_or_list: str, jobs: int, output: str | None, executor: str, rules_dirs: tuple[str, ...], no_redact: bool) -> None:
    """Diagnose every run under ROOT (or listed in a file), one JSON line per run, resumably.

    A run is a folder that directly holds log files, or an archive of one. Results come in sorted
    run order; with -o, a stopped batch resumes where it stopped when run again.
    """
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: keep the default
        pass
    try:
        code = report_errors(lambda: run_batch(root_or_list, jobs=jobs, output=output, executor=executor, rules_dirs=rules_dirs, redact=not no_redact))
    except (Interrupted, KeyboardInterrupt):
        click.echo("rltriage: batch interrupted; run the same command again to resume" if output else "rltriage: batch interrupted", err=True)
        code = EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    sys.exit(code)
