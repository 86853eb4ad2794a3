"""`rltriage watch` against real writer processes and real files: stalls behind noise are caught,
slow progress is not, new rank files are followed, on-stall output joins the diagnosis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from rltriage.cli.common import EXIT_STALLED
from rltriage.cli.watch import watch_command
from rltriage.tools.watch import Judge, Verdict, Watcher

from .conftest import FIXTURES, REPO

WATCH = [sys.executable, "-c", "from rltriage.cli.watch import watch_command; watch_command()"]
SECTIONS = ["Failure summary", "Boundary proof", "Root-cause ranking", "Minimal fix", "Patch plan", "Verification"]

# The writers share this prologue: a TRL GRPO run up to its first generation, flushed line by line.
PROLOGUE = r'''
import sys, time
from pathlib import Path
from typing import Any
out = open(sys.argv[1], "a", buffering=1)
def say(text):
    out.write(text + "\n"); out.flush()
def stamp():
    return time.strftime("%Y-%m-%d %H:%M:%S")
say(f"{stamp()} - INFO - __main__ - Training parameters GRPOConfig(output_dir='out/grpo', num_generations=8, max_completion_length=1024, per_device_train_batch_size=8, use_vllm=True)")
say("[INFO|trainer.py:2414] 2025-06-02 10:59:12,331 >> ***** Running training *****")
say("[INFO|trainer.py:2415] 2025-06-02 10:59:12,331 >>   Num examples = 7,473")
say("[INFO|trainer.py:2422] 2025-06-02 10:59:12,331 >>   Total optimization steps = 100")
out.write("  0%|          | 0/100 [00:00<?, ?it/s]"); out.flush()
say("")
say(f"{stamp()} - INFO - rltriage - [rltriage] stage=trainer_started")
say(f"{stamp()} - INFO - rltriage - [rltriage] stage=first_generation_started step=0")
say(f"{stamp()} - INFO - rltriage - [rltriage] stage=first_generation_finished step=0")
'''

# Hangs in the reward: the same heartbeat (and vLLM idle stats) forever, only the numbers change.
STALLING = PROLOGUE + r'''
for i in range(300):
    say(f"{stamp()} - WARNING - __main__ - heartbeat: no step completed for {i * 0.2:.1f} s")
    say(f"INFO 06-02 10:59:{i % 60:02d} [loggers.py:111] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")
    time.sleep(0.2)
'''

# Slow but alive: once the test says "go" (the watcher is running by then), a step every 0.7 s for
# ~5 s, noise in between, then the final train_runtime dict.
PROGRESSING = PROLOGUE + r'''
say(f"{stamp()} - INFO - rltriage - [rltriage] stage=reward_computed step=0")
go = Path(sys.argv[1]).parent.parent / "go"
while not go.exists():
    time.sleep(0.02)
for step in range(1, 8):
    for _ in range(3):
        say(f"{stamp()} - WARNING - __main__ - heartbeat: still alive")
        time.sleep(0.7 / 3)
    out.write(f"\r  {step}%|          | {step}/100 [00:{step:02d}<10:00, 0.7s/it]"); out.flush()
    say("")
    say(f"{{'loss': 0.0{step}, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'epoch': 0.0{step}}}")
say("{'train_runtime': 5.2, 'train_samples_per_second': 0.381, 'train_steps_per_second': 1.3, 'train_loss': 0.0043, 'epoch': 0.07}")
time.sleep(30)
'''

# train.log goes quiet (heartbeats only); rank_1.log appears once the test says "go" (the watcher
# is running by then) and its bar advances for ~3.4 s.
LATE_RANK = PROLOGUE + r'''
go = Path(sys.argv[1]).parent.parent / "go"
rank, n = None, 0
for i in range(300):
    say(f"{stamp()} - WARNING - __main__ - heartbeat: waiting")
    if rank is None and go.exists():
        rank = open(Path(sys.argv[1]).parent / "rank_1.log", "a", buffering=1)
        rank.write("[rank1]: [rltriage] stage=first_generation_started step=0\n"); rank.flush()
    elif rank is not None and n < 17:
        n += 1
        rank.write(f"[rank1]: Processed prompts: {n * 6}%|#         | {n}/17 [00:0{n % 10}<00:01]\n"); rank.flush()
    time.sleep(0.2)
'''


def start_writer(tmp_path: Path, script: str, log: Path) -> subprocess.Popen[bytes]:
    path = tmp_path / "writer.py"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    return subprocess.Popen([sys.executable, str(path), str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_watch(args: list[str], timeout: float = 18) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run([*WATCH, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - began


def wait_for(path: Path, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size > 0):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.kill()
    proc.wait(timeout=5)


def test_a_hung_run_that_keeps_printing_heartbeats_is_reported_as_stalled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    writer = start_writer(tmp_path, STALLING, run / "train.log")
    try:
        wait_for(run / "train.log")
        done, elapsed = run_watch([str(run), "--stall-after", "2", "--poll", "0.2"])
    finally:
        stop(writer)
    assert done.returncode == EXIT_STALLED, done.stderr
    assert writer.returncode is not None and elapsed < 15
    for section in SECTIONS:
        assert section in done.stdout
    assert "first_generation_finished" in done.stdout  # the boundary the markers proved
    assert "rltriage watch: watching 1 file(s)" in done.stderr
    assert "STALLED — no progress for" in done.stderr and "repeated line(s)" in done.stderr


def test_a_slowly_progressing_run_is_never_stalled_and_exits_0_when_it_finishes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    writer = start_writer(tmp_path, PROGRESSING, run / "train.log")
    watch = None
    try:
        wait_for(run / "train.log")
        # The steps start only once the watcher has read the files, so a busy machine that starts
        # the watcher late cannot turn this into a run that had finished before it was watched.
        watch = subprocess.Popen([*WATCH, str(run), "--stall-after", "2", "--poll", "0.2"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watch.stderr is not None
        first = watch.stderr.readline()
        assert "watching 1 file(s)" in first, first
        (tmp_path / "go").touch()
        began = time.monotonic()
        out, err = watch.communicate(timeout=30)
        elapsed = time.monotonic() - began
    finally:
        stop(writer)
        if watch is not None and watch.poll() is None:
            stop(watch)
    assert watch.returncode == 0, out + err
    assert "STALLED" not in err and out == ""
    assert "run finished" in err and "train_runtime" in err
    assert elapsed > 4  # it really followed the ~5 s of slow steps


def test_a_rank_log_that_appears_later_is_followed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    writer = start_writer(tmp_path, LATE_RANK, run / "train.log")
    watch = None
    try:
        wait_for(run / "train.log")
        watch = subprocess.Popen(
            [*WATCH, str(run), "--stall-after", "2", "--poll", "0.2", "--format", "json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert watch.stderr is not None
        first = watch.stderr.readline()  # printed once the existing files are read
        assert "watching 1 file(s)" in first
        (tmp_path / "go").touch()
        began = time.monotonic()
        out, err = watch.communicate(timeout=15)
        elapsed = time.monotonic() - began
    finally:
        stop(writer)
        if watch is not None and watch.poll() is None:
            stop(watch)
    assert watch.returncode == EXIT_STALLED, err
    assert f"following new file {run / 'rank_1.log'}" in err
    # train.log makes no progress after "go"; rank_1.log's advancing bar held the stall off for ~3.4 s.
    assert elapsed > 4.5, err
    diagnosis = json.loads(out)
    assert {Path(i["path"]).name for i in diagnosis["inputs"]} == {"train.log", "rank_1.log"}


def test_on_stall_output_in_the_run_folder_joins_the_diagnosis(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text((FIXTURES / "stacks/remote_judge_hang_stack_dump" / "train.log").read_text(encoding="utf-8"), encoding="utf-8")
    dump = FIXTURES / "stacks/remote_judge_hang_stack_dump" / "py-spy-dump-4121.txt"
    command = f"cat {dump}; echo on-stall stderr line >&2"
    done, elapsed = run_watch([str(run), "--stall-after", "1", "--poll", "0.2", "--on-stall", command, "--format", "json"])
    assert done.returncode == EXIT_STALLED, done.stderr
    captured = run / "rltriage-on-stall.txt"
    text = captured.read_text(encoding="utf-8")
    assert "Process 4121:" in text and "on-stall stderr line" in text and "exited 0" in text
    diagnosis = json.loads(done.stdout)
    kinds = {Path(i["path"]).name: i["kind"] for i in diagnosis["inputs"]}
    assert kinds["rltriage-on-stall.txt"] == "stack_dump"
    # The stack dump is what names the top cause (the reward blocked in a remote call).
    assert any("rltriage-on-stall.txt" in e["path"] for e in diagnosis["causes"][0]["evidence"])


def test_on_stall_for_a_single_file_goes_to_a_temp_file_that_is_diagnosed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("[rltriage] stage=first_generation_started step=0\n", encoding="utf-8")
    result = CliRunner().invoke(watch_command, [str(log), "--stall-after", "0.3", "--poll", "0.1", "--on-stall", "echo hello-from-on-stall", "--format", "json"])
    assert result.exit_code == EXIT_STALLED, result.output
    diagnosis = json.loads(result.stdout)
    extra = [i["path"] for i in diagnosis["inputs"] if "rltriage-on-stall-" in i["path"]]
    assert len(extra) == 1 and "hello-from-on-stall" in Path(extra[0]).read_text(encoding="utf-8")
    Path(extra[0]).unlink()


def test_on_stall_command_that_hangs_is_killed_after_its_timeout(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("starting\n", encoding="utf-8")
    began = time.monotonic()
    result = CliRunner().invoke(
        watch_command, [str(tmp_path), "--stall-after", "0.2", "--poll", "0.1", "--on-stall", "echo before; sleep 30", "--on-stall-timeout", "1"]
    )
    assert result.exit_code == EXIT_STALLED and time.monotonic() - began < 10
    assert "timed out after 1 s" in (tmp_path / "rltriage-on-stall.txt").read_text(encoding="utf-8")


def test_missing_path_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(watch_command, [str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such file or folder" in result.stderr
    done, _ = run_watch([str(tmp_path / "nope")])
    assert done.returncode == 2


def test_bad_rule_pack_exits_3(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("x\n", encoding="utf-8")
    pack = tmp_path / "pack" / "rules" / "x"
    pack.mkdir(parents=True)
    (pack / "y.yaml").write_text("id: x.y\nnot_a_key: 1\n", encoding="utf-8")
    result = CliRunner().invoke(watch_command, [str(tmp_path / "train.log"), "--rules-dir", str(tmp_path / "pack")])
    assert result.exit_code == 3, result.output


def test_watched_paths_disappearing_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("starting\n", encoding="utf-8")
    proc = subprocess.Popen([*WATCH, str(log), "--stall-after", "30", "--poll", "0.1"], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        log.unlink()
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "every watched path is gone" in err


def test_an_already_finished_run_exits_0_at_once(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text((FIXTURES / "stages/clean_grpo_run" / "train.log").read_text(encoding="utf-8"), encoding="utf-8")
    result = CliRunner().invoke(watch_command, [str(tmp_path), "--poll", "0.1"])
    assert result.exit_code == 0 and "already finished" in result.stderr


def test_judge_counts_repeats_once_and_advancing_counters_every_time() -> None:
    judge = Judge()
    idle = "INFO 06-02 10:59:{:02d} [loggers.py:111] Engine 000: Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs"
    assert judge.judge(idle.format(5), "v") is Verdict.progress
    assert judge.judge(idle.format(15), "v") is Verdict.noise
    ray = "(WorkerDict pid={}, ip=10.0.3.{}) waiting for weights"
    assert judge.judge(ray.format(11, 9), "d") is Verdict.progress
    assert judge.judge(ray.format(12, 7) + " [repeated 7x across cluster]", "d") is Verdict.noise
    assert judge.judge("Avg generation throughput: 512.3 tokens/s, Running: 8 reqs", "v") is Verdict.progress
    bar = "  {}%|#         | {}/100 [00:{:02d}<?, ?it/s]"
    assert judge.judge(bar.format(1, 1, 1), "t") is Verdict.progress
    assert judge.judge(bar.format(1, 1, 9), "t") is Verdict.noise  # a redraw that does not advance
    assert judge.judge(bar.format(2, 2, 12), "t") is Verdict.progress
    assert judge.judge("(TaskRunner pid=1) step:3 - critic/score/mean:0.1", "t") is Verdict.progress
    assert judge.judge("(TaskRunner pid=1) step:3 - critic/score/mean:0.2", "t") is Verdict.noise
    assert judge.judge("Training completed. Do not forget to share your model", "t") is Verdict.finished


def test_watcher_reads_only_new_bytes_and_restarts_after_truncation_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("alpha 1\n", encoding="utf-8")
    seen: list[str] = []
    watcher = Watcher([str(tmp_path)])
    watcher.poll(lambda _v, line: seen.append(line))
    with log.open("a", encoding="utf-8") as handle:
        handle.write("beta 2\npartial")
    watcher.poll(lambda _v, line: seen.append(line))
    assert seen == ["alpha 1", "beta 2"]
    log.write_text("gamma\n", encoding="utf-8")  # truncated: shorter than the offset
    watcher.poll(lambda _v, line: seen.append(line))
    assert seen[-1] == "gamma"
    os.rename(log, tmp_path / "train.log.1")  # rotation: the old file keeps its offset
    log.write_text("delta\n", encoding="utf-8")
    result = watcher.poll(lambda _v, line: seen.append(line))
    assert seen[-1] == "delta" and seen.count("gamma") == 1
    assert result.new_files == [str(log)]
