"""End-to-end: a real TRL GRPOTrainer step on CPU, instrumented by `rltriage.integrations.trl`.

The run's own log must then let rltriage prove the boundary (a clean step) or name the stuck call
(a reward that never returns, caught by the stall watchdog's faulthandler dump).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

for _name in ("torch", "transformers", "trl", "datasets", "tokenizers"):
    pytest.importorskip(
        _name, reason=f"the TRL integration test needs the 'trl' extra ({_name} not importable): pip install 'rltriage[trl]'"
    )

from rltriage.integrations import trl as integration  # noqa: E402
from rltriage.pipeline.run import Analysis, analyse  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# A tiny, randomly initialised Qwen2 with a word-level tokenizer built on the spot: nothing is downloaded,
# and one GRPO step takes well under a second on CPU (interpreter and library imports dominate).
TRAIN_SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    watchdog_seconds = float(sys.argv[1])
    reward_sleep = float(sys.argv[2])
    output_dir = sys.argv[3]

    from rltriage.integrations.trl import RltriageCallback, install_stall_watchdog, instrument

    install_stall_watchdog(watchdog_seconds)

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    sentences = ["what is two plus two", "the answer is four", "name a colour", "blue is a colour",
                 "count to three", "one two three"]
    word_level = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    word_level.train_from_iterator(sentences, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=word_level, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)
    dataset = Dataset.from_dict({"prompt": ["what is two plus two", "name a colour", "count to three", "the answer is"]})


    def length_reward(completions, **kwargs):
        if reward_sleep:
            time.sleep(reward_sleep)
        return [float(len(completion)) for completion in completions]


    args = GRPOConfig(
        output_dir=output_dir, per_device_train_batch_size=2, num_generations=2, max_completion_length=8,
        max_steps=1, report_to=[], logging_steps=1, use_cpu=True, save_strategy="no", bf16=False,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[length_reward], args=args,
        train_dataset=dataset, callbacks=[RltriageCallback()],
    )
    instrument(trainer)
    trainer.train()
    print("training script finished", flush=True)
    """
)

MARKER = re.compile(r"\[rltriage\] stage=(?P<stage>\w+)(?: step=(?P<step>\d+))?(?: seconds=(?P<seconds>[\d.]+))?")
# A faulthandler frame (no comma before `in`, unlike an exception traceback) inside the test's reward.
REWARD_DUMP_FRAME = re.compile(r'^  File "[^"]*", line \d+ in length_reward$')


def _environment(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HOME": str(tmp / "hf_home"),
            # The script lives in tmp; the repo root carries the `rltriage` symlink to the working tree.
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
        }
    )
    return env


def _write_script(tmp: Path) -> Path:
    script = tmp / "train_grpo_tiny.py"
    script.write_text(TRAIN_SCRIPT, encoding="utf-8")
    return script


def _read(log: Path) -> str:
    # Bytes, not read_text: universal newlines would turn tqdm's carriage returns into extra lines
    # and shift every line number away from the ones rltriage cites.
    return log.read_bytes().decode("utf-8", errors="replace")


def _stages(analysis: Analysis) -> set[str]:
    return {str(fact.get("name")) for fact in analysis.inference.facts_of("stage")}


def test_clean_step_proves_its_boundary(tmp_path: Path) -> None:
    script = _write_script(tmp_path)
    log = tmp_path / "train.log"
    started = time.monotonic()
    with log.open("wb") as out:
        completed = subprocess.run(
            [sys.executable, str(script), "120", "0", str(tmp_path / "out")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environment(tmp_path),
            cwd=tmp_path,
            timeout=120,
        )
    elapsed = time.monotonic() - started
    text = _read(log)
    assert completed.returncode == 0, text[-4000:]
    assert elapsed < 60, f"one CPU step took {elapsed:.1f} s"

    markers = [m.groupdict() for m in MARKER.finditer(text)]
    stages = [m["stage"] for m in markers]
    expected = [
        "trainer_started",
        "first_generation_started",
        "first_generation_finished",
        "reward_started",
        "reward_computed",
        "step_completed",
    ]
    assert stages == expected, stages
    step = markers[-1]
    assert step["step"] == "1" and step["seconds"] is not None
    assert markers[4]["seconds"] is not None
    # A healthy step re-arms and finally cancels the watchdog: no stack dump in the log.
    assert "Timeout (" not in text
    assert "rewards/length_reward" in text, "the wrapped reward must keep its metric name"

    analysis = analyse([str(log)])
    derived = _stages(analysis)
    assert {"first_step_completed", "reward_computed", "first_generation_finished"} <= derived, derived
    assert analysis.diagnosis.symptom.value != "hang"
    assert analysis.diagnosis.boundary.last_completed is not None
    assert analysis.diagnosis.boundary.last_completed.value == "first_step_completed"
    _verify_if_available(log, expect_pass=True)


def _verify_if_available(log: Path, *, expect_pass: bool) -> None:
    # `rltriage.verify` is written concurrently; check it only where it exists.
    try:
        verify_module = importlib.import_module("rltriage.tools.verify")
    except ImportError:
        return
    result = verify_module.verify([str(log)])
    failed = [check.name for check in result.checks if not check.passed]
    if expect_pass:
        assert result.passed and not failed, failed
    else:
        assert not result.passed and failed


def test_stuck_reward_is_diagnosed_from_the_watchdog_dump(tmp_path: Path) -> None:
    script = _write_script(tmp_path)
    log = tmp_path / "train.log"
    deadline = time.monotonic() + 60
    with log.open("wb") as out:
        # The reward sleeps far past the 3 s watchdog; the run is killed once a dump shows it, as an
        # operator would kill a hung job, so the log ends without a completed step.
        process = subprocess.Popen(
            [sys.executable, str(script), "3", "300", str(tmp_path / "out")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environment(tmp_path),
            cwd=tmp_path,
        )
        try:
            while time.monotonic() < deadline and process.poll() is None:
                text = _read(log)
                if "Timeout (" in text and any(REWARD_DUMP_FRAME.match(line) for line in text.splitlines()):
                    break
                time.sleep(0.2)
        finally:
            process.kill()
            process.wait(timeout=30)
    text = _read(log)
    lines = text.split("\n")
    assert "Timeout (0:00:03)!" in text, text[-4000:]
    frame_lines = {index + 1 for index, line in enumerate(lines) if REWARD_DUMP_FRAME.match(line)}
    assert frame_lines, text[-4000:]
    stages = [m["stage"] for m in MARKER.finditer(text)]
    assert stages[-1] == "reward_started" and "step_completed" not in stages, stages

    diagnosis = analyse([str(log)]).diagnosis
    assert diagnosis.symptom.value == "hang"
    assert diagnosis.primary_bucket is not None and diagnosis.primary_bucket.value == "reward_blocking"
    assert diagnosis.boundary.first_missing is not None
    assert diagnosis.boundary.first_missing.value == "reward_computed"
    cited = {evidence.line for cause in diagnosis.causes if cause.bucket.value == "reward_blocking" for evidence in cause.evidence}
    assert cited & frame_lines, f"no reward_blocking cause cites a dump frame {sorted(frame_lines)}: {sorted(cited)}"
    _verify_if_available(log, expect_pass=False)


class _FakeState:
    global_step = 0


class _FakeTrainer:
    """Just the surface `instrument` touches, to check wrapping without a training run."""

    def __init__(self, funcs: list[Any]) -> None:
        self.reward_funcs = funcs
        self.state = _FakeState()
        self.generated = 0

    def _generate(self, prompts: list[str]) -> list[str]:
        self.generated += 1
        return [p + " done" for p in prompts]

    def add_callback(self, callback: object) -> None:
        self.callback = callback


def sync_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [1.0 for _ in completions]


async def async_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [0.5 for _ in completions]


def test_instrument_keeps_names_async_and_is_idempotent(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _FakeTrainer([sync_reward, async_reward])
    # An explicit stream: pytest's logging plugin may otherwise route markers to the logger.
    callback = integration.instrument(trainer, stream=sys.stderr)
    integration.instrument(trainer, stream=sys.stderr)
    assert isinstance(callback, integration.RltriageCallback)
    sync_wrapped, async_wrapped = trainer.reward_funcs
    assert sync_wrapped.__name__ == "sync_reward" and async_wrapped.__name__ == "async_reward"
    assert inspect.iscoroutinefunction(async_wrapped), "TRL gathers async rewards only if they stay async"

    trainer._generate(["a"])
    trainer._generate(["b"])
    assert sync_wrapped(completions=["x", "y"]) == [1.0, 1.0]
    assert asyncio.run(async_wrapped(completions=["x"])) == [0.5]

    err = capsys.readouterr().err
    stages = [m["stage"] for m in MARKER.finditer(err)]
    assert stages == [
        "first_generation_started",
        "first_generation_finished",
        "reward_started",
        "reward_computed",
        "reward_started",
        "reward_computed",
    ], stages
    assert trainer.generated == 2
