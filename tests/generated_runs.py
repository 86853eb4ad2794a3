"""Runs made up for the html tests: a large multi-rank hang, and a run whose logs are hostile to a
web page. Deterministic: the same arguments write the same bytes."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

START = datetime(2025, 5, 14, 9, 10, 0)
SECRET = "hf_" + "Q7xWm2LpR4tZ8vB1nK6yD3fH9sJ0cE5aGu"
SCRIPT = "<script>window.__rltriage_pwned = 1</script>"


def _stamp(seconds: float) -> str:
    moment = START + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"


def _glog(seconds: float) -> str:
    moment = START + timedelta(seconds=seconds)
    return moment.strftime("%m%d %H:%M:%S.") + f"{moment.microsecond:06d}"


PYSPY_WAITING = """Process {pid}: /usr/bin/python3.11 -m torch.distributed.run --nproc_per_node 8 train_grpo.py --config grpo.yaml
Python v3.11.7 (/usr/bin/python3.11)

Thread {pid} (idle): "MainThread"
    all_gather_object (torch/distributed/distributed_c10d.py:2891)
    wrapper (torch/distributed/c10d_logger.py:81)
    gather_object (accelerate/utils/operations.py:433)
    _calculate_rewards (trl/trainer/grpo_trainer.py:1146)
    _generate_and_score_completions (trl/trainer/grpo_trainer.py:1301)
    _prepare_inputs (trl/trainer/grpo_trainer.py:1012)
    training_step (transformers/trainer.py:3745)
    _inner_training_loop (transformers/trainer.py:2560)
    train (transformers/trainer.py:2245)
    main (train_grpo.py:140)
    <module> (train_grpo.py:151)
"""
PYSPY_REWARD = """Process {pid}: /usr/bin/python3.11 -m torch.distributed.run --nproc_per_node 8 train_grpo.py --config grpo.yaml
Python v3.11.7 (/usr/bin/python3.11)

Thread {pid} (active+gil): "MainThread"
    _sympify (sympy/core/sympify.py:481)
    simplify (sympy/simplify/simplify.py:604)
    is_equiv (rewards/math_reward.py:57)
    math_verify_reward (rewards/math_reward.py:88)
    _calculate_rewards (trl/trainer/grpo_trainer.py:1120)
    _generate_and_score_completions (trl/trainer/grpo_trainer.py:1301)
    _prepare_inputs (trl/trainer/grpo_trainer.py:1012)
    training_step (transformers/trainer.py:3745)
    _inner_training_loop (transformers/trainer.py:2560)
    train (transformers/trainer.py:2245)
    main (train_grpo.py:140)
    <module> (train_grpo.py:151)
"""


def many_ranks(root: Path, ranks: int = 256, stuck: int = 137, stacks: int = 8) -> Path:
    """A GRPO run on `ranks` ranks: rank `stuck` never returns from a sympy-based reward on step 0,
    every other rank waits for it in all_gather_object until NCCL's watchdog ends it 10 minutes
    later. One log per rank, a launcher log, and py-spy dumps of the `stacks` ranks of the stuck
    rank's node, taken before the timeouts (as an engineer dumps the node that looks odd)."""
    node = range(stuck - stuck % stacks, stuck - stuck % stacks + stacks) if stacks else range(0)
    rng = random.Random(ranks * 7919 + stuck)
    root.mkdir(parents=True, exist_ok=True)
    launcher = [
        f"W{_glog(0)} 41800 site-packages/torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1",
        f"{_stamp(1)} - INFO - __main__ - Training parameters GRPOConfig(output_dir='out/grpo-math', num_generations=8, max_completion_length=1024, "
        f"per_device_train_batch_size=8, reward_funcs=['math_verify_reward'], num_processes={ranks})",
        f"{_stamp(2)} - INFO - __main__ - launching {ranks} ranks on {ranks // 8} nodes",
    ]
    for second in range(60, 1260, 120):
        launcher.append(f"{_stamp(second)} - INFO - __main__ - heartbeat: {ranks} workers alive")
    (root / "launcher.log").write_text("\n".join(launcher) + "\n", encoding="utf-8")
    for rank in range(ranks):
        t = 3 + rng.random() * 2
        lines = [f"{_stamp(t)} - INFO - rank {rank} - loading model Qwen/Qwen2.5-7B-Instruct"]
        t += 20 + rng.random() * 6
        lines.append("Loading checkpoint shards: 100%|██████████| 4/4 [00:20<00:00,  5.01s/it]")
        lines.append(f"{_stamp(t)} - INFO - rltriage - [rltriage] stage=model_loaded")
        t += 8 + rng.random() * 3
        lines.append(f"{_stamp(t)} - INFO - rltriage - [rltriage] stage=trainer_started")
        lines.append("  0%|          | 0/500 [00:00<?, ?it/s]")
        lines.append(f"{_stamp(t)} - INFO - rltriage - [rltriage] stage=first_generation_started step=0")
        for _ in range(4):
            t += 9 + rng.random() * 3
            lines.append(
                f"{_stamp(t)} - INFO - vllm - Avg generation throughput: {800 + rng.random() * 400:.1f} tokens/s, Running: {rng.randrange(8, 64)} reqs"
            )
        t += 4 + rng.random()
        lines.append(f"{_stamp(t)} - INFO - rltriage - [rltriage] stage=first_generation_finished step=0 seconds={t - 35:.1f}")
        lines.append(f"{_stamp(t)} - INFO - rltriage - [rltriage] stage=reward_started step=0")
        lines.append(f"{_stamp(t + 0.2)} - INFO - rewards - computing math_verify_reward for 64 completions")
        if rank != stuck:
            t += 2 + rng.random() * 2
            lines.append(f"{_stamp(t)} - INFO - rewards - math_verify_reward done in {t - 70:.1f} s; gathering rewards from all ranks")
            t_out = 700 + rng.random() * 30
            lines.append(
                f"[rank{rank}]:[E{_glog(t_out)} 1234 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum=7, OpType=ALLGATHER, NumelIn=1, NumelOut={ranks}, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."
            )
            lines.append(f"[rank{rank}]:[E{_glog(t_out + 0.1)} 1234 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank {rank}] Process group watchdog thread terminated with exception")
            lines.append("terminate called after throwing an instance of 'c10::DistBackendError'")
            lines.append(
                f"  what():  [PG 0 (default_pg) Rank {rank}] Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLGATHER) ran for 600031 milliseconds before timing out."
            )
        (root / f"rank{rank}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if rank in node:
            dump = PYSPY_REWARD if rank == stuck else PYSPY_WAITING
            (root / f"stacks-rank{rank}.txt").write_text(dump.format(pid=50000 + rank), encoding="utf-8")
    return root


def hostile(root: Path) -> Path:
    """A small crash whose cited lines (and the lines around them) hold markup, a token and a
    private key: the page must show them as text, redacted."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{_stamp(0)} - INFO - __main__ - starting <b>bold</b> & <i>friends</i>",
        f"{_stamp(1)} - INFO - __main__ - HF_TOKEN={SECRET}",
        f"{_stamp(2)} - INFO - __main__ - reward server says {SCRIPT}",
        "Traceback (most recent call last):",
        '  File "/home/user/train_grpo.py", line 151, in <module>',
        "    main()",
        '  File "/home/user/rewards/judge.py", line 12, in score',
        f"    raise RuntimeError(\"judge returned {SCRIPT}\")",
        f"RuntimeError: judge returned {SCRIPT} <img src=x onerror=\"window.__rltriage_pwned=2\">",
        f"{_stamp(4)} - INFO - __main__ - dumping the service account for debugging",
        # Within the failure's excerpt: a key printed over several lines.
        "-----BEGIN PRIVATE KEY-----",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7bGl2ZXNlY3JldGtleWJvZHk",
        "-----END PRIVATE KEY-----",
        f"{_stamp(5)} - INFO - __main__ - token after the failure: {SECRET}",
    ]
    (root / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
