"""`rltriage batch` and the progress bar."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import rltriage
from rltriage.cli.batch import batch_command
from rltriage.inputs.discover import discover
from rltriage.pipeline.progress import Progress, tracked
from rltriage.pipeline.read import read_sources
from rltriage.pipeline.scan import scanner_for
from rltriage.tools.batch import Output, find_runs

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
# A handful of fixture kinds, each a different failure (and one clean run), all with logs.
# Quick ones: the batch runs all 1,000 runs more than once.
KINDS = (
    "memory/host_oom_ray",
    "nccl/illegal_memory",
    "trl/too_few_generations",
    "transformers/vl_config_startup",
    "slurm/pyxis_import_all_failed",
    "posttrain/preflight_fusedadam_bf16",
    "stacks/native_allocator",
    "stacks/two_ranks_collective",
)
RUNS = 1000


def make_tree(root: Path, count: int) -> list[str]:
    """`count` runs copied from the fixture kinds: every 7th a .tar.gz, every 5th one folder deeper.

    Returns the kind of each run, in sorted run order.
    """
    root.mkdir(parents=True)
    kinds: dict[str, str] = {}
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        source = FIXTURES / kind
        files = sorted(p for p in source.iterdir() if p.name != "expect.yaml")
        parent = root / f"group{i % 5}" if i % 5 == 0 else root
        parent.mkdir(exist_ok=True)
        if i % 7 == 0:
            run = parent / f"run{i:04d}.tar.gz"
            with tarfile.open(run, "w:gz") as tar:
                for f in files:
                    info = tar.gettarinfo(str(f), arcname=f"run{i:04d}/{f.name}")
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    with f.open("rb") as handle:
                        tar.addfile(info, handle)
        else:
            run = parent / f"run{i:04d}"
            run.mkdir()
            for f in files:
                shutil.copyfile(f, run / f.name)
        kinds[str(run)] = kind
    return [kinds[k] for k in sorted(kinds)]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(batch_command, list(args), catch_exceptions=False)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="ascii").splitlines()]


def subprocess_batch(*args: str) -> subprocess.Popen[bytes]:
    # A session of its own, so the kill reaches the workers too and nothing else.
    return subprocess.Popen(
        [sys.executable, "-c", "from rltriage.cli.batch import batch_command; batch_command()", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("batch") / "runs"
    return root, make_tree(root, RUNS)


@pytest.fixture(scope="module")
def reference(tree: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted batch over the whole tree."""
    out = tmp_path_factory.mktemp("ref") / "results.jsonl"
    result = invoke(str(tree[0]), "--jobs", "2", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"{RUNS} runs, {RUNS} diagnosed, 0 errors" in result.output  # the summary, on stdout with -o
    return out


def test_batch_gives_the_results_of_diagnose(tree: tuple[Path, list[str]], reference: Path) -> None:
    root, kinds = tree
    got = records(reference)
    runs = [r["run"] for r in got]
    assert runs == sorted(runs) and len(runs) == RUNS
    assert sum(r.endswith(".tar.gz") for r in runs) == len(range(0, RUNS, 7))
    # A random sample, plus the first run of every kind both as a folder and as an archive.
    picked = set(random.Random(5).sample(range(RUNS), 100))
    seen: set[tuple[str, bool]] = set()
    for index, run in enumerate(runs):
        key = (kinds[index], run.endswith(".tar.gz"))
        if key not in seen:
            seen.add(key)
            picked.add(index)
    assert len(seen) == 2 * len(KINDS)
    for index in sorted(picked):
        line = dict(got[index])
        run = line.pop("run")
        assert line == rltriage.diagnose([run]).model_dump(mode="json"), run
    assert {r["primary_bucket"] for r in got} >= {None, "cluster_infra"}


def wait_for_lines(out: Path, proc: subprocess.Popen[bytes], count: int) -> None:
    deadline = time.monotonic() + 60
    while not out.exists() or out.read_bytes().count(b"\n") < count:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "batch ended early"
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_interrupted_batches_resume_byte_identical(tree: tuple[Path, list[str]], reference: Path, tmp_path: Path) -> None:
    root, expected = str(tree[0]), reference.read_bytes()
    out = tmp_path / "results.jsonl"
    # SIGTERM: the batch stops its workers and leaves only complete lines.
    proc = subprocess_batch(root, "--jobs", "2", "-o", str(out))
    wait_for_lines(out, proc, 100)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert b"run the same command again to resume" in stderr
    stopped = out.read_bytes()
    assert stopped.endswith(b"\n") and expected.startswith(stopped)
    # SIGKILL of the resumed batch, workers and all: at most one partial line.
    proc = subprocess_batch(root, "--jobs", "2", "-o", str(out))
    try:
        wait_for_lines(out, proc, stopped.count(b"\n") + 150)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    whole, _, partial = out.read_bytes().rpartition(b"\n")
    assert stopped.count(b"\n") + 150 <= whole.count(b"\n") + 1 < RUNS
    assert expected.startswith(whole + b"\n")  # complete lines only, in order
    if not partial:  # make sure the partial-line path is exercised even if the kill fell between lines
        with out.open("ab") as handle:
            handle.write(expected[len(whole) + 1 :][:40])
    result = invoke(root, "--jobs", "2", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "dropped a partial last line" in result.stderr
    assert "from a previous batch" in result.output
    assert out.read_bytes() == expected


def test_deterministic_across_jobs_and_to_stdout(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_tree(root, 40)
    one = invoke(str(root), "--jobs", "1")
    two = invoke(str(root), "--jobs", "2")
    assert one.exit_code == two.exit_code == 0
    assert one.stdout == two.stdout and one.stdout.count("\n") == 40
    assert "40 runs, 40 diagnosed" in one.stderr  # the summary goes to stderr when lines go to stdout


def test_what_counts_as_a_run(tmp_path: Path) -> None:
    root = tmp_path / "root"
    oom = FIXTURES / "memory/host_oom_ray" / "main_ppo.log"
    (root / "a" / "ray" / "logs").mkdir(parents=True)
    shutil.copyfile(oom, root / "a" / "driver.log")
    shutil.copyfile(oom, root / "a" / "ray" / "logs" / "worker-1.err")  # part of run a, not a run
    (root / "only_config").mkdir()
    (root / "only_config" / "config.yaml").write_text("a: 1\n")
    (root / "archives").mkdir()
    with tarfile.open(root / "archives" / "b.tgz", "w:gz") as tar:
        tar.add(oom, arcname="driver.log")
    shutil.copyfile(oom, root / "archives" / "c.log.gz.notes")  # neither a log nor an archive
    (root / ".hidden").mkdir()
    shutil.copyfile(oom, root / ".hidden" / "x.log")
    assert [r.path for r in find_runs(str(root))] == [str(root / "a"), str(root / "archives" / "b.tgz")]
    assert [r.path for r in find_runs(str(root / "a"))] == [str(root / "a")]  # a run given as ROOT


def test_list_file_errors_and_summary(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_tree(runs, 3)
    listing = tmp_path / "list.txt"
    listing.write_text(f"# my runs\n{runs / 'run0002'}\n\n{tmp_path / 'missing'}\n{runs / 'run0001'}\n")
    out = tmp_path / "out.jsonl"
    result = invoke(str(listing), "-o", str(out))
    assert result.exit_code == 0, result.output
    got = records(out)
    assert [r["run"] for r in got] == sorted([str(runs / "run0001"), str(runs / "run0002"), str(tmp_path / "missing")])
    missing = next(r for r in got if r["run"].endswith("missing"))
    assert missing == {"run": str(tmp_path / "missing"), "error": f"{tmp_path / 'missing'}: no such file or folder"}
    assert "runs that could not be diagnosed: 1" in result.output and "top causes" in result.output
    assert "runs per primary bucket" in result.output


def test_redacts_by_default(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    token = "hf_" + "a" * 34
    (run / "train.log").write_text(f"Traceback (most recent call last):\nRuntimeError: CUDA out of memory; HF_TOKEN={token}\n")
    assert token not in invoke(str(tmp_path / "runs")).stdout
    assert token in invoke(str(tmp_path / "runs"), "--no-redact").stdout


def test_refuses_to_write_into_a_file_it_did_not_write(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_tree(runs, 2)
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my precious notes\nno newline at the end")
    result = invoke(str(runs), "-o", str(notes))
    assert result.exit_code == 2 and "refusing" in result.stderr
    assert notes.read_bytes() == b"my precious notes\nno newline at the end"
    assert invoke(str(tmp_path / "nope")).exit_code == 2


def test_a_whole_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"run":"a","error":"x"}\n{"run":"b","error":"y"}')
    output = Output(str(path))
    output.close()
    assert set(output.done) == {"a", "b"}
    assert path.read_bytes() == b'{"run":"a","error":"x"}\n{"run":"b","error":"y"}\n'


# --- progress ---------------------------------------------------------------------------------


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_on_a_tty_after_a_second() -> None:
    stream, clock = FakeTTY(), Clock()
    bar = Progress(total_bytes=10 << 20, total_files=4, total_runs=2, stream=stream, clock=clock, env={}, width=200)
    bar.advance(1 << 20, 1, 0)
    assert stream.getvalue() == ""  # quick work stays quiet
    clock.now += 2
    bar.advance(1 << 20, 1, 1)
    text = stream.getvalue()
    assert text.startswith("\r[##########..........]  50% 1/2 runs")
    assert "2.0/10.0 MB" in text and "2/4 files" in text and "1.0 MB/s" in text
    clock.now += 0.01
    bar.advance(1 << 20, 1, 0)
    assert stream.getvalue() == text  # redraws are rate-limited
    bar.close()
    assert stream.getvalue().endswith("\r" + " " * (len(text) - 1) + "\r")
    bar.advance(1, 1, 1)  # after close: nothing
    assert stream.getvalue().endswith("\r")


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_progress_silent_when_forbidden(env: dict[str, str]) -> None:
    stream, clock = FakeTTY(), Clock()
    with Progress(100, 1, stream=stream, clock=clock, env=env) as bar:
        clock.now += 5
        bar.advance(100, 1)
    assert stream.getvalue() == "" and not bar.enabled


def test_progress_silent_when_not_a_tty_and_one_bar_at_a_time() -> None:
    clock = Clock()
    plain = io.StringIO()
    with Progress(100, 1, stream=plain, clock=clock, env={}) as bar:
        clock.now += 5
        bar.advance(100, 1)
    assert plain.getvalue() == ""
    outer, inner = FakeTTY(), FakeTTY()
    with Progress(100, 1, stream=outer, clock=clock, env={}) as first:
        with Progress(100, 1, stream=inner, clock=clock, env={}) as second:
            clock.now += 5
            second.advance(100, 1)
            first.advance(100, 1)
    assert inner.getvalue() == "" and "100%" in outer.getvalue()
    with Progress(1, stream=FakeTTY(), env={}) as again:
        assert again.enabled  # the slot is free again


def test_tracked_counts_files_and_bytes_of_a_scan(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"x" * 3000)
    with tarfile.open(tmp_path / "b.tar", "w") as tar:
        tar.add(tmp_path / "a.log", arcname="one.log")
        tar.add(tmp_path / "a.log", arcname="two.log")
    sources = discover([str(tmp_path)], [])
    stream, clock = FakeTTY(), Clock()
    seen = []
    for item in tracked(sources, iter(range(len(sources))), stream=stream, clock=clock, env={}):
        clock.now += 1
        seen.append(item)
    assert seen == [0, 1, 2]
    size = 3000 + (tmp_path / "b.tar").stat().st_size
    assert f"{size / (1 << 20):.1f}/{size / (1 << 20):.1f} MB" in stream.getvalue() and "3/3 files" in stream.getvalue()
    assert stream.getvalue().endswith("\r")


class Ticking:
    """A clock that moves a second every time it is read."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def test_tracked_advances_within_a_large_file_as_it_is_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1 of a long run\n" * 250_000)  # about 5 MB: several chunks
    sources = discover([str(log)], [])
    kb = rltriage.load_knowledge_base()
    stream = FakeTTY()
    results = read_sources(sources, kb, scanner_for(kb), 1)
    done = list(tracked(sources, results, stream=stream, clock=Ticking(), env={}))
    assert len(done) == 1
    draws = [d for d in stream.getvalue().split("\r") if "files" in d]
    total = log.stat().st_size / (1 << 20)
    within = [d for d in draws if "0/1 files" in d and f"/{total:.1f} MB" in d and not d.lstrip("[#. ").startswith("0%")]
    assert within, draws  # the bar moved before the file was done
    assert any("1/1 files" in d and f"{total:.1f}/{total:.1f} MB" in d for d in draws)


# --- Ray (last: it starts threads, and the other tests fork) ----------------------------------


def test_ray_executor_matches_local(tmp_path: Path) -> None:
    try:
        import ray
    except ImportError:
        pytest.skip("Ray is not installed (pip install 'rltriage[ray]')")
    root = tmp_path / "runs"
    make_tree(root, 20)
    local = invoke(str(root), "--jobs", "2")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path / "ray.jsonl"
        result = invoke(str(root), "--executor", "ray", "-o", str(out))
    finally:
        ray.shutdown()
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="ascii") == local.stdout and local.stdout.count("\n") == 20
