#!/usr/bin/env python3
"""Speed and memory of `rltriage diagnose`, side by side with `LC_ALL=C grep -c -E -f <every signature's pattern>`.

Generates (in a temporary folder, or --workdir) two training logs of each requested size, with a
few real failure lines planted in them:

* sparse: NCCL INFO, trainer and wandb lines, vLLM stats now and then, tqdm bars redrawn with
  carriage returns — almost no line is a signature's;
* dense: the same run as the trainer and vLLM print it — `{'loss': …}` dicts, bars (alone and
  redrawn before the dict), vLLM engine stats and `Model loading took …` behind Ray prefixes,
  `Processed prompts` bars, verl metrics: about half its lines match a signature;

plus a folder of 256 rank logs, one of 100,000 tiny logs and a hung run with 256 py-spy dumps,
then reports in one run:

* the time of a diagnosis of a two-line log with its text report (start-up, knowledge base, report:
  what every run pays);
* diagnose wall time vs grep wall time on the same file, as a ratio (grep in the C locale, its
  fastest; in a UTF-8 locale the same grep is many times slower), with the default one thread and
  with --jobs 2 (the log's chunks classified in two threads);
* peak RSS of diagnose for each log (target: <= 200 MB and flat as the input grows);
* the 256 rank logs with --jobs 1 and --jobs 2, and the 100,000 tiny logs (time, peak RSS);
* the hung run with 64 and with 256 py-spy dumps (time, peak RSS);
* with --baseline, the same logs and tiny files diagnosed by another build too (a venv of an
  earlier commit), and this build's time over that build's.

Usage: python bench/run.py [--sizes 0.1,1,4] [--tiny 100000] [--ranks 256] [--dumps 256] [--workdir DIR] [--keep]
                           [--baseline PYTHON] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOISE = [
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Channel {ch:02d}/0 : {dev}[{dev}] -> {nxt}[{nxt}] via P2P/IPC/read",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO comm 0x7f{hex} rank {dev} nranks 8 cudaDev {dev} nvmlDev {dev} busId {bus}000 commId 0x{hex} - Init COMPLETE",
    "(EngineCore_DP0 pid={pid}) INFO {mm}-{dd} {hh}:{mi}:{ss} [loggers.py:123] Engine 000: Avg prompt throughput: {tp:.1f} tokens/s, Avg generation throughput: {gt:.1f} tokens/s, Running: {run} reqs, Waiting: 0 reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {pc:.1f}%",
    "{yyyy}-{mm}-{dd} {hh}:{mi}:{ss} - INFO - __main__ - rollout batch {step} collected {n} completions",
    "/usr/local/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
    "wandb: WARNING Step must only increase in log calls.  Step {step} < {n}; dropping {{'train/loss': 0.1}}.",
    "(WorkerDict pid={pid}, ip=10.0.{a}.{b}) INFO {mm}-{dd} {hh}:{mi}:{ss} [gpu_model_runner.py:1347] Model loading took 2.8764 GiB and 1.532114 seconds",
    # What signatures match in a real GRPO run: the trainer's log dict every step, its bar (alone, or
    # redrawn with carriage returns before tqdm.write prints the dict), vLLM's offline bar, verl's metrics.
    "{{'loss': {loss:.4f}, 'grad_norm': {gn:.3f}, 'learning_rate': {lr:.2e}, 'rewards/accuracy_reward/mean': {rw:.3f}, 'reward': {rw:.3f}, 'reward_std': {rs:.3f}, 'completion_length': {cl:.1f}, 'epoch': {ep:.2f}}}",
    "{bar}",
    "{bar}\r{bar2}\r{{'loss': {loss:.4f}, 'grad_norm': {gn:.3f}, 'learning_rate': {lr:.2e}, 'reward': {rw:.3f}, 'reward_std': {rs:.3f}, 'epoch': {ep:.2f}}}",
    "Processed prompts:   0%|          | 0/{np} [00:00<?, ?it/s]\rProcessed prompts:  50%|#####     | {half}/{np} [00:02<00:02, 12.00it/s]\rProcessed prompts: 100%|##########| {np}/{np} [00:05<00:00, 12.00it/s, est. speed input: {tp:.2f} toks/s, output: {gt:.2f} toks/s]",
    "step:{step} - actor/entropy:{ent:.3f} - actor/pg_loss:{loss:.4f} - critic/score/mean:{rw:.3f} - critic/score/max:1.0 - response_length/mean:{cl:.1f} - timing_s/step:{ts:.1f}",
]
FAILURES = [
    "[rank3]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use.",
    "W1218 20:27:21.433063 140 ucx_utils.cpp:628] 8 NVIDIA GPU(s) were detected, but UCX CUDA support was not found! GPU memory is not supported.",
]


# How often each kind of line appears. Sparse: a GRPO driver log with NCCL_DEBUG=INFO, where almost
# no line is a signature's (NCCL and trainer lines dominate, vLLM prints its stats every few seconds,
# the bar is one long line of redraws now and then). Dense: the same run as the trainer and vLLM print
# it, where log dicts, bars, engine stats and model loading lines are about half of all lines.
WEIGHTS = {
    "sparse": [40, 20, 1, 30, 4, 4, 0.005, 0, 0, 0, 0, 0],
    "dense": [25, 5, 8, 15, 3, 3, 3, 10, 12, 3, 3, 5],
}
BLOCK = 8 << 20  # distinct text generated per log; larger logs repeat it (the matchers see the same mix)


def progress_line(step: int, total: int) -> str:
    redraws = [f" {int(100 * s / total):3d}%|{'█' * (s * 10 // total):<10}| {s}/{total} [{s:02d}:00<10:00, 12.00s/it]" for s in range(max(0, step - 30), step + 1)]
    return "\r".join(redraws)


def _bar(step: int, total: int) -> str:
    return f" {int(100 * step / total):3d}%|{'█' * (step * 10 // total):<10}| {step}/{total} [{step // 60:02d}:{step % 60:02d}<10:00, 12.00s/it]"


def _line(rng: random.Random, step: int, weights: list[float]) -> str:
    kind = rng.choices(range(len(NOISE)), weights=weights)[0]
    n_prompts = rng.choice((64, 128, 256))
    return NOISE[kind].format(
        host="node-" + str(rng.randrange(16)), pid=rng.randrange(1000, 99999), tid=rng.randrange(1000, 99999), dev=rng.randrange(8),
        nxt=rng.randrange(8), ch=rng.randrange(32), hex=f"{rng.getrandbits(40):010x}", bus=rng.randrange(10, 99), mm="05", dd="14",
        hh=f"{rng.randrange(24):02d}", mi=f"{rng.randrange(60):02d}", ss=f"{rng.randrange(60):02d}", tp=rng.random() * 1000, gt=rng.random() * 5000,
        run=rng.randrange(64), kv=rng.random() * 100, pc=rng.random() * 100, yyyy=2025, step=step, n=rng.randrange(512), a=rng.randrange(255), b=rng.randrange(255),
        loss=rng.random() * 0.1, gn=rng.random(), lr=1e-6, rw=rng.random(), rs=rng.random() * 0.3, cl=rng.random() * 1000, ep=step / 5000,
        bar=_bar(step, 5000), bar2=_bar(step + 1, 5000), np=n_prompts, half=n_prompts // 2, ent=rng.random(), ts=rng.random() * 60,
    )


def _block(mode: str, seed: int) -> str:
    rng = random.Random(seed)
    weights = WEIGHTS[mode]
    lines: list[str] = ["[INFO|trainer.py:2414] 2025-05-14 09:13:14,220 >> ***** Running training *****"]
    size = 0
    step = 0
    while size < BLOCK:
        if rng.random() < 0.01:
            step += 1
            if mode == "sparse":
                lines.append(progress_line(step, 100000))
                size += len(lines[-1]) + 1
                continue
        lines.append(_line(rng, step, weights))
        size += len(lines[-1]) + 1
    return "\n".join(lines) + "\n"


def write_log(path: Path, size: int, seed: int = 7, mode: str = "sparse", block: str | None = None) -> None:
    """`size` bytes of generated log: a block of distinct lines repeated (from a seed-chosen offset),
    with three failure lines planted at 30%, 60% and 95% of the file."""
    text = block if block is not None else _block(mode, seed)
    offset = text.index("\n", random.Random(seed).randrange(len(text) // 2)) + 1 if block is not None else 0
    data = (text[offset:] + text[:offset]).encode("utf-8")
    written = 0
    pending = [int(size * f) for f in (0.3, 0.6, 0.95)]
    with path.open("wb") as out:
        while written < size:
            piece = data[: size - written] if size - written < len(data) else data
            cut = piece.rfind(b"\n") + 1 or len(piece)
            piece = piece[:cut]
            while pending and written + len(piece) > pending[0]:
                at = piece.rfind(b"\n", 0, pending[0] - written) + 1
                out.write(piece[:at] + FAILURES[3 - len(pending)].encode() + b"\n")
                written += at + len(FAILURES[3 - len(pending)]) + 1
                piece = piece[at:]
                pending.pop(0)
            out.write(piece)
            written += len(piece)


def write_tiny_files(folder: Path, count: int) -> None:
    """A run folder of `count` tiny per-process logs: three lines of the sparse mix each."""
    folder.mkdir()
    rng = random.Random(11)
    for index in range(count):
        sub = folder / f"worker-{index // 1000:03d}"
        sub.mkdir(exist_ok=True)
        lines = [_line(rng, index, WEIGHTS["sparse"]) for _ in range(3)]
        (sub / f"worker-{index}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


PY_SPY_DUMP = """Process {pid}: /usr/bin/python3 -m torch.distributed.run --nproc_per_node {ranks} train.py
Python v3.11.7 (/usr/bin/python3)

Thread {pid} (idle): "MainThread"
    barrier (torch/distributed/distributed_c10d.py:4159)
    wrapper (torch/distributed/c10d_logger.py:81)
    wait_for_everyone (accelerate/utils/other.py:235)
    _move_model_to_vllm (trl/trainer/grpo_trainer.py:980)
    _generate_and_score_completions (trl/trainer/grpo_trainer.py:1160)
    training_step (transformers/trainer.py:3745)
    train (transformers/trainer.py:2245)
    <module> (train.py:88)
Thread {tid} (idle): "Thread-1"
    wait (threading.py:327)
    run (tqdm/_monitor.py:60)
"""


def write_dumps(folder: Path, count: int) -> None:
    """A hung run's folder: the driver log and one py-spy dump per rank."""
    folder.mkdir()
    (folder / "train.log").write_text(
        "[INFO|trainer.py:2414] 2025-06-05 10:01:30,001 >> ***** Running training *****\n  0%|          | 0/100 [00:00<?, ?it/s]\n",
        encoding="utf-8",
    )
    for rank in range(count):
        (folder / f"rank{rank}-stacks.txt").write_text(PY_SPY_DUMP.format(pid=50000 + rank, tid=60000 + rank, ranks=count), encoding="utf-8")


def ere(pattern: str) -> str | None:
    """A signature pattern in grep -E syntax, or None when it cannot be expressed there."""
    if re.search(r"\(\?[=!<]|\\[bBAZ]|\(\?P=", pattern):
        return None
    out = re.sub(r"\(\?P<\w+>", "(", pattern)
    out = out.replace("(?:", "(").replace("(?i)", "")
    out = re.sub(r"([*+?}])\?", r"\1", out)
    out = out.replace(r"\d", "[0-9]").replace(r"\D", "[^0-9]")
    return out


def _grep_accepts(pattern: str) -> bool:
    return subprocess.run(["grep", "-E", "-e", pattern, "/dev/null"], capture_output=True).returncode != 2


def grep_patterns(workdir: Path) -> tuple[Path, int, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import rltriage

    kb = rltriage.load_knowledge_base()
    patterns = [ere(sig.model.pattern) for sig in kb.signatures.values()]
    usable = [p for p in patterns if p and _grep_accepts(p)]
    target = workdir / "patterns.ere"
    target.write_text("\n".join(usable) + "\n", encoding="utf-8")
    return target, len(usable), len(patterns)


def signature_share(mode: str) -> float:
    """The share of a log's lines that a signature matches: each kind of line is scanned on its own
    with rltriage's scanner (its full path), and counts when every line of that kind is a hit."""
    import io

    import rltriage
    from rltriage.base.vocabulary import InputKind
    from rltriage.pipeline.scan import Scanner, config_keys

    kb = rltriage.load_knowledge_base()
    scanner = Scanner(kb, config_keys(kb), aggregate=False)
    matched = 0.0
    for kind, weight in enumerate(WEIGHTS[mode]):
        if not weight:
            continue
        rng = random.Random(kind)
        lines = [_line(rng, step, [int(k == kind) for k in range(len(NOISE))]) for step in range(50)]
        scan = scanner.scan("kind.log", InputKind.driver_log, io.BytesIO(("\n".join(lines) + "\n").encode()))
        if max((t.count for t in scan.tallies.values()), default=0) >= len(lines):
            matched += weight
    return matched / sum(WEIGHTS[mode])


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Wall time, peak RSS (KiB) and output of one command, measured in a fresh child."""
    probe = (
        "import resource, subprocess, sys, time, json;"
        # Output goes to a pipe, not /dev/null: GNU grep stops at the first match when it writes to
        # /dev/null, which would make the baseline meaningless.
        "t = time.perf_counter(); done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE);"
        "print(json.dumps([time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.stdout[:200].decode('utf-8', 'replace'),"
        " done.returncode, done.stderr[-500:].decode('utf-8', 'replace')]))"
    )
    result = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    seconds, rss, out, code, err = json.loads(result.stdout)
    # A run that failed is not a measurement: grep exits 1 when nothing matched, diagnose exits 0.
    if code not in ((0, 1) if cmd[0] == "grep" else (0,)):
        raise SystemExit(f"bench: {' '.join(cmd)} exited {code}: {err.strip()}")
    return seconds, rss, out


def paired(first: list[str], second: list[str] | None, repeat: int) -> tuple[list[tuple[float, int, str]], list[tuple[float, int, str]]]:
    """Each command `repeat` times, interleaved and in alternating order (first second, second first,
    …): this machine's speed drifts by up to half within minutes, and a ratio of two commands run
    back to back would measure the drift. Without `second`, only `first`."""
    ones: list[tuple[float, int, str]] = []
    others: list[tuple[float, int, str]] = []
    for round_ in range(repeat):
        order = [(first, ones), (second, others)] if round_ % 2 == 0 else [(second, others), (first, ones)]
        for cmd, into in order:
            if cmd is not None:
                into.append(timed(cmd))
    return ones, others


def count_lines(path: Path) -> int:
    lines = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 24):
            lines += block.count(b"\n")
    return lines


GREP_ENV = {"LC_ALL": "C"}  # grep at its fastest: in a UTF-8 locale the same grep is many times slower


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.1,1,4", help="log sizes in GB, for the sparse and the dense log")
    parser.add_argument("--tiny", type=int, default=100_000, help="files in the folder of tiny logs (0: skip)")
    parser.add_argument("--ranks", type=int, default=256, help="rank logs of 2 MB for --jobs 1 vs 2 (0: skip)")
    parser.add_argument("--dumps", type=int, default=256, help="py-spy dumps of a hung run, against a quarter as many (0: skip)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each timing (the fastest is kept); the two builds, and --jobs 1 and 2, take turns going first"
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="a Python with another rltriage build installed (a venv of an earlier commit): the sparse, dense and tiny runs are timed with it too, side by side",
    )
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rltriage-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rltriage = [sys.executable, "-m", "rltriage", "diagnose", "--format", "json"]
    baseline = [args.baseline, "-m", "rltriage", "diagnose", "--format", "json"] if args.baseline else None
    try:
        patterns, usable, total = grep_patterns(workdir)
        compiled = subprocess.run(
            [sys.executable, "-c", "from rltriage.pipeline.matcher import native_available; print(native_available())"], capture_output=True, text=True
        ).stdout.strip()
        print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, compiled scanner (_linescan): {'yes' if compiled == 'True' else 'no'}")
        print(f"signatures: {total} ({usable} expressible for grep -E); baseline: LC_ALL=C grep -c -E -f <those patterns>")
        blocks = {mode: _block(mode, 7) for mode in WEIGHTS}
        # The aggregated path's compiled matcher is built once per knowledge base and kept on disk:
        # a first run builds it, as a user's first large log would.
        warm = workdir / "warm-up.log"
        write_log(warm, 8 << 20, mode="dense", block=blocks["dense"])
        print(f"warm-up (builds or loads the cached matcher): {timed([*rltriage, str(warm)])[0]:.2f} s")
        print(
            "matched: lines a signature matches (each kind of line checked with rltriage's scanner); "
            "grep: lines grep counts (patterns it cannot express are left out)"
        )
        if baseline:
            print(f"baseline build: {args.baseline}; 'vs base' is this build's time over the baseline's (below 1: faster)")
        # What every diagnosis pays before its first line: start-up, the knowledge base, the report.
        small = workdir / "one-line.log"
        small.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access was encountered\n", encoding="utf-8")
        # As a user runs it: the text report (the other runs write json, which renders no template).
        runs, base_runs = paired([*rltriage[:-2], str(small)], [*baseline[:-2], str(small)] if baseline else None, max(args.repeat, 3))
        line = f"a two-line log, text report: {min(r[0] for r in runs):.2f} s, peak RSS {max(r[1] for r in runs) / 1024:.1f} MB"
        if baseline:
            base_s = min(r[0] for r in base_runs)
            line += f"; baseline build {base_s:.2f} s, peak RSS {max(r[1] for r in base_runs) / 1024:.1f} MB (this build: {min(r[0] for r in runs) / base_s:.2f}x the time)"
        print(line, flush=True)
        extra = f" {'base s':>8} {'vs base':>8} {'base RSS MB':>12}" if baseline else ""
        print("-j2: the same diagnosis with --jobs 2 (the log's chunks classified in two threads)")
        print(
            f"{'log':>6} {'size':>6} {'matched':>8} {'grep':>5} {'grep s':>8} {'diagnose s':>11} {'ratio':>6} {'peak RSS MB':>12}"
            f" {'-j2 s':>7} {'-j2 ratio':>9} {'-j2 RSS MB':>11}{extra}"
        )
        for mode in ("sparse", "dense"):
            share = signature_share(mode)
            for size_gb in [float(s) for s in args.sizes.split(",") if s]:
                log = workdir / f"{mode}-{size_gb:g}GB.log"
                if not log.exists():
                    write_log(log, int(size_gb * 1e9), mode=mode, block=blocks[mode])
                greps = [timed(["grep", "-c", "-E", "-f", str(patterns), str(log)], GREP_ENV) for _ in range(args.repeat)]
                grep_s = min(g[0] for g in greps)
                grepped = int(greps[0][2].strip() or 0) / max(count_lines(log), 1)
                runs, base_runs = paired([*rltriage, str(log)], [*baseline, str(log)] if baseline else None, args.repeat)
                diag_s = min(r[0] for r in runs)
                rss = max(r[1] for r in runs)
                threaded = [timed([*rltriage, "--jobs", "2", str(log)]) for _ in range(args.repeat)]
                two_s, two_rss = min(r[0] for r in threaded), max(r[1] for r in threaded)
                line = (
                    f"{mode:>6} {size_gb:>5g}G {share:>8.0%} {grepped:>5.0%} {grep_s:>8.2f} {diag_s:>11.2f} {diag_s / grep_s:>6.2f} {rss / 1024:>12.1f}"
                    f" {two_s:>7.2f} {two_s / grep_s:>9.2f} {two_rss / 1024:>11.1f}"
                )
                if baseline:
                    base_s = min(r[0] for r in base_runs)
                    line += f" {base_s:>8.2f} {diag_s / base_s:>8.2f} {max(r[1] for r in base_runs) / 1024:>12.1f}"
                print(line, flush=True)
                if not args.keep:
                    log.unlink()
        if args.ranks:
            folder = workdir / f"run-{args.ranks}-ranks"
            if not folder.exists():
                folder.mkdir()
                for rank in range(args.ranks):
                    write_log(folder / f"rank{rank}.log", 2_000_000, seed=rank, block=blocks["sparse"])
            size_mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
            results = {}
            for jobs, runs in zip((1, 2), paired([*rltriage, "--jobs", "1", str(folder)], [*rltriage, "--jobs", "2", str(folder)], args.repeat), strict=True):
                seconds, rss = min(r[0] for r in runs), max(r[1] for r in runs)
                results[jobs] = seconds
                print(f"{args.ranks} rank logs ({size_mb:.0f} MB) --jobs {jobs}: {seconds:.2f} s, {size_mb / seconds:.0f} MB/s, peak RSS {rss / 1024:.1f} MB")
            print(f"speed-up with --jobs 2: {results[1] / results[2]:.2f}x")
        if args.dumps:
            # Every dump's stacks are checked against the others' (a rule negates "another rank is
            # elsewhere"): the time per dump should not grow with the number of dumps.
            per_dump = {}
            for count in (max(1, args.dumps // 4), args.dumps):
                folder = workdir / f"dumps-{count}"
                if not folder.exists():
                    write_dumps(folder, count)
                seconds, rss, _out = timed([*rltriage, str(folder)])
                per_dump[count] = seconds
                print(f"{count} py-spy dumps: {seconds:.2f} s, peak RSS {rss / 1024:.1f} MB")
            small, large = sorted(per_dump)
            print(f"time for {large} dumps / time for {small}: {per_dump[large] / per_dump[small]:.2f} (the dumps are {large // small}x as many)")
        if args.tiny:
            folder = workdir / f"tiny-{args.tiny}"
            if not folder.exists():
                write_tiny_files(folder, args.tiny)
            runs, base_runs = paired([*rltriage, str(folder)], [*baseline, str(folder)] if baseline else None, args.repeat)
            seconds, rss = min(r[0] for r in runs), max(r[1] for r in runs)
            print(f"{args.tiny} tiny logs: {seconds:.2f} s, peak RSS {rss / 1024:.1f} MB")
            if baseline:
                base_s, base_rss = min(r[0] for r in base_runs), max(r[1] for r in base_runs)
                print(f"{args.tiny} tiny logs, baseline build: {base_s:.2f} s, peak RSS {base_rss / 1024:.1f} MB (this build: {seconds / base_s:.2f}x the time, {rss / base_rss:.2f}x the memory)")
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
