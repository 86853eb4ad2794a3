"""Report text a user reads first: a clean run is not "silent", has nothing to verify; the code lines
of an explained traceback are not "unexplained"."""

from __future__ import annotations

from pathlib import Path

import pytest

import rltriage

from .conftest import FIXTURES

CLEAN_WITH_A_LONG_LAST_STEP = """\
2025-06-14 09:00:00 - INFO - rltriage - [rltriage] stage=trainer_started
2025-06-14 09:00:40 - INFO - rltriage - [rltriage] stage=first_generation_finished step=0 seconds=40.0
2025-06-14 09:00:47 - INFO - rltriage - [rltriage] stage=reward_computed step=0 seconds=7.1
2025-06-14 09:01:22 - INFO - rltriage - [rltriage] stage=first_step_completed step=1 seconds=42.0
{'loss': 0.0004, 'grad_norm': 0.3302, 'learning_rate': 9.5e-07, 'reward': 0.25, 'epoch': 0.01}
2025-06-14 09:14:41 - INFO - __main__ - Training completed. Do not forget to share your model on huggingface.co/models =)
{'train_runtime': 881.2, 'train_samples_per_second': 0.381, 'train_steps_per_second': 0.024, 'train_loss': 0.0043, 'epoch': 0.04}
"""

TRACEBACK = """\
[rltriage] stage=trainer_started
[rltriage] stage=first_generation_finished step=0
Traceback (most recent call last):
  File "/srv/job/train_grpo.py", line 88, in <module>
    trainer.train()
  File "/usr/lib/python3.11/site-packages/trl/trainer/grpo_trainer.py", line 1146, in _calculate_rewards
    output = reward_func(prompts=prompts, completions=completions)
  File "/srv/job/rewards/math_reward.py", line 57, in accuracy_reward
    raise ValueError(f"could not parse answer {answer!r}")
ValueError: could not parse answer 'x'
"""


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_a_finished_clean_run_is_not_silent_and_has_nothing_to_verify(tmp_path: Path, fmt: str) -> None:
    log = tmp_path / "train.log"
    log.write_text(CLEAN_WITH_A_LONG_LAST_STEP, encoding="utf-8")
    for inputs in ([log], [FIXTURES / "stages/clean_grpo_run"]):
        diagnosis = rltriage.diagnose(inputs)
        assert diagnosis.causes == [] and diagnosis.failures == []
        assert diagnosis.boundary.silent_seconds is None
        report = rltriage.render(diagnosis, fmt)
        assert "silent for" not in report
        assert "rerun and diagnose the new logs" not in report
        assert "nothing to verify: no failure was found" in report


def test_the_lines_of_an_explained_traceback_are_not_unexplained(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(TRACEBACK, encoding="utf-8")
    diagnosis = rltriage.diagnose([log])
    assert diagnosis.causes and diagnosis.failures
    assert diagnosis.unexplained == []


PREFLIGHT = FIXTURES / "trl/preflight_bad_config/config.yaml"


@pytest.mark.parametrize(("fmt", "header"), [("text", "— preflight: 3 problem(s), 1 blocking"), ("markdown", "# rltriage preflight — 3 problem(s), 1 blocking")])
def test_a_preflight_report_says_what_it_found_not_symptom_none(fmt: str, header: str) -> None:
    from click.testing import CliRunner

    from rltriage.cli import main

    result = CliRunner().invoke(main, ["preflight", "--format", fmt, str(PREFLIGHT)])
    assert result.exit_code == 1
    first = result.stdout.splitlines()[0]
    assert header in first and "symptom" not in first


@pytest.mark.parametrize(("processes", "code", "blocking"), [(None, 1, "2 process(es)"), ("3", 0, None), ("4", 1, "4 process(es)")])
def test_preflight_takes_the_world_size(processes: str | None, code: int, blocking: str | None) -> None:
    from click.testing import CliRunner

    from rltriage.cli import main

    # The config says num_processes: 2; 2 × 4 and 4 × 4 are no multiple of num_generations=6, 3 × 4 is.
    args = ["preflight", str(PREFLIGHT)] + (["--num-processes", processes] if processes else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    if blocking:
        assert blocking in result.stdout
    else:
        assert "trl.contract_generations_divide_batch" not in result.stdout
    world = CliRunner().invoke(main, ["preflight", "--world-size", "4", str(PREFLIGHT)])
    assert world.exit_code == 1 and "4 process(es)" in world.stdout
