from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rltriage.base.errors import InputError
from rltriage.cli.verify import verify_command
from rltriage.tools.verify import CHECK_NAMES, step_time_in, verify

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
CLEAN = FIXTURES / "stages/clean_grpo_run"
HANG = FIXTURES / "trl/reward_never_returned"
VERL = FIXTURES / "lego/lr_zero_reward_flat"
DISAGG = FIXTURES / "disagg/dynamic_sampling_abort"


def test_clean_trl_run_passes_with_evidence() -> None:
    result = verify([CLEAN])
    assert result.passed
    assert [c.name for c in result.checks] == list(CHECK_NAMES)
    by_name = {c.name: c for c in result.checks}
    # The step marker is the most direct proof, then the step's log dict.
    assert [e.line for e in by_name["first_step_completed"].evidence][:2] == [57, 56]
    assert by_name["progress_advanced"].evidence[0].line == 55
    assert "42.0" in (by_name["step_time_logged"].evidence[0].detail or "")
    assert by_name["reward_computed"].evidence[0].line == 52
    assert all(c.missing is None for c in result.checks)


@pytest.mark.parametrize("fixture", [VERL, DISAGG])
def test_disaggregated_and_verl_runs_that_trained_pass(fixture: Path) -> None:
    result = verify([fixture])
    # The disaggregated run trained 37 steps and then raised: every criterion holds but the last.
    assert [c.passed for c in result.checks] == [True, True, True, True, fixture != DISAGG], [c.missing for c in result.checks]
    step_time = next(c for c in result.checks if c.name == "step_time_logged")
    assert any(k in (step_time.evidence[0].detail or "") for k in ("timing_s/step", "step_time_s"))


def test_verl_reward_comes_from_the_step_metric_line() -> None:
    reward = next(c for c in verify([VERL]).checks if c.name == "reward_computed")
    assert "critic/score/mean" in (reward.evidence[0].detail or "")


def test_hung_run_fails_with_what_is_missing() -> None:
    result = verify([HANG])
    assert not result.passed
    by_name = {c.name: c for c in result.checks}
    first = by_name["first_step_completed"]
    assert not first.passed and "first_generation_finished" in (first.missing or "") and "train.log:19" in (first.missing or "")
    progress = by_name["progress_advanced"]
    assert not progress.passed and "never left 0" in (progress.missing or "") and "train.log:15" in (progress.missing or "")
    step_time = by_name["step_time_logged"]
    # The checkpoint-shard bar's s/it is not a trainer step time.
    assert not step_time.passed and "no step time" in (step_time.missing or "")
    reward = by_name["reward_computed"]
    assert not reward.passed and "train.log:20" in (reward.missing or "") and "never returned" in (reward.missing or "")


def test_step_time_extraction() -> None:
    assert step_time_in(" 12%|█▏        | 60/500 [10:00<1:13:20, 10.00s/it]") == (2, "10.00 s/it at step 60/500")
    assert step_time_in(" 40%|████      | 2/5 [00:01<00:01,  1.52it/s]") == (2, "1.52 it/s at step 2/5")
    assert step_time_in("  0%|          | 0/500 [00:00<?, ?it/s]") is None
    assert step_time_in("Loading checkpoint shards: 100%|██| 5/5 [00:06<00:00,  1.31s/it]", trainer_bar=False) is None
    assert step_time_in("Training Progress:   1%|   | 3/300 [04:01<6:38:11, 80.44s/it]", trainer_bar=False) == (2, "80.44 s/it at step 3/300")
    assert step_time_in("[rltriage] stage=step_completed step=1 seconds=12.5") == (0, "12.5 s for step 1 (stage marker)")
    assert step_time_in("step:1 - actor/lr:1e-06 - timing_s/step:571.9 - perf/x:1") == (1, "timing_s/step = 571.9 s")
    assert step_time_in("step 3 | {'train/loss': 0.1, 'train/step_time_s': 171.2}") == (1, "train/step_time_s = 171.2 s")
    assert step_time_in("{'train_runtime': 840.2, 'train_samples_per_second': 0.381}") == (3, "train_runtime = 840.2 s (whole run)")


def test_val_only_verl_line_is_not_progress() -> None:
    result = verify([FIXTURES / "lego/val_only_moe_garbled"])
    assert not any(c.passed for c in result.checks[:4])


def test_marker_only_run(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "[rltriage] stage=trainer_started\n"
        "[rltriage] stage=first_generation_finished step=0 seconds=3.0\n"
        "[rltriage] stage=reward_computed step=0 seconds=0.1\n"
        "[rltriage] stage=step_completed step=1 seconds=4.2\n",
        encoding="utf-8",
    )
    result = verify([log])
    assert result.passed, [c.missing for c in result.checks]


def test_missing_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        verify([tmp_path / "nope.log"])


def test_cli_text_and_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(verify_command, [str(CLEAN)])
    assert ok.exit_code == 0, ok.output
    lines = ok.output.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["PASS"] * 4
    assert "train.log:57" in lines[0]
    failed = runner.invoke(verify_command, [str(HANG)])
    assert failed.exit_code == 1
    assert failed.output.count("FAIL  ") == 4 and "missing:" in failed.output  # a hang: no failure line
    assert "PASS  the run ends without" in failed.output
    assert runner.invoke(verify_command, [str(tmp_path / "absent.log")]).exit_code == 2
    assert runner.invoke(verify_command, []).exit_code == 2


def test_cli_json() -> None:
    result = CliRunner().invoke(verify_command, ["--format", "json", str(HANG)])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["passed"] is False
    assert [c["passed"] for c in data["checks"]] == [False, False, False, False, True]


def test_cli_broken_rule_pack_exits_3(tmp_path: Path) -> None:
    pack = tmp_path / "pack" / "rules" / "x"
    pack.mkdir(parents=True)
    (pack / "broken.yaml").write_text("id: x.broken\ntitle: t\nnot_a_key: 1\n", encoding="utf-8")
    result = CliRunner().invoke(verify_command, ["--rules-dir", str(tmp_path / "pack"), str(CLEAN)])
    assert result.exit_code == 3


def test_subprocess_entry_point() -> None:
    code = "from rltriage.cli.verify import verify_command; verify_command()"
    ok = subprocess.run([sys.executable, "-c", code, str(CLEAN)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("PASS  first GRPO step completes")
    failed = subprocess.run([sys.executable, "-c", code, "--format", "json", str(HANG)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["passed"] is False


CLEAN_START = (
    "[rltriage] stage=trainer_started\n"
    "[rltriage] stage=first_generation_finished step=0 seconds=3.0\n"
    "[rltriage] stage=reward_computed step=0 seconds=0.1\n"
    "[rltriage] stage=step_completed step=1 seconds=4.2\n"
    " 1%|          | 1/200 [00:04<13:18, 4.20s/it]\n"
)
OOM_AFTER_STEP_1 = CLEAN_START + (
    "Traceback (most recent call last):\n"
    '  File "/opt/trl/trainer/grpo_trainer.py", line 1203, in _compute_loss\n'
    "    logits = model(input_ids).logits\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.63 GiB. GPU 0 has a total capacity of 79.10 GiB of which 2.91 GiB is free.\n"
)
NCCL_AT_STEP_120 = CLEAN_START + (
    " 60%|██████    | 120/200 [08:24<05:36, 4.20s/it]\n"
    "[rank0]:[E1103 04:41:02.118221204 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=98213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800084 milliseconds before timing out.\n"
    "[rank0]:[E1103 04:41:02.118300000 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated with exception: "
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=98213, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
    "ran for 1800084 milliseconds before timing out.\n"
    "terminate called after throwing an instance of 'c10::DistBackendError'\n"
)


@pytest.mark.parametrize(("log", "line"), [(OOM_AFTER_STEP_1, 9), (NCCL_AT_STEP_120, 9)])
def test_a_run_that_crashed_after_its_first_step_fails(tmp_path: Path, log: str, line: int) -> None:
    path = tmp_path / "train.log"
    path.write_text(log, encoding="utf-8")
    clean = tmp_path / "clean.log"
    clean.write_text(CLEAN_START, encoding="utf-8")
    assert verify([clean]).passed  # the same start without the crash passes
    result = verify([path])
    assert not result.passed
    by_name = {c.name: c for c in result.checks}
    # The generic criteria hold (a step did complete); the failure check is what fails, naming the line.
    assert all(by_name[n].passed for n in CHECK_NAMES[:4])
    failure = by_name["no_failure"]
    assert not failure.passed and f"train.log:{line}" in (failure.missing or "")
    out = CliRunner().invoke(verify_command, [str(path)])
    assert out.exit_code == 1
    assert f"FAIL  the run ends without an uncaught exception, fatal signal, crash or out-of-memory — {path}:{line}:" in out.output


def test_against_the_earlier_diagnosis_checks_that_its_cause_is_gone(tmp_path: Path) -> None:
    runner = CliRunner()
    from rltriage.cli import main

    earlier = tmp_path / "diagnosis.json"
    made = runner.invoke(main, ["diagnose", "--format", "json", "-o", str(earlier), str(HANG)])
    assert made.exit_code == 0, made.output
    first_cause = json.loads(earlier.read_text())["causes"][0]["rule"]
    # A rerun that is fixed: the cause is gone and the generic criteria hold.
    fixed = runner.invoke(verify_command, ["--against", str(earlier), str(CLEAN)])
    assert fixed.exit_code == 0, fixed.output
    assert "PASS  the diagnosed cause is gone: " in fixed.output and f"({first_cause})" in fixed.output
    # The cause-specific criteria the diagnosis listed are shown, not silently dropped.
    assert "TODO  a reward (`'reward':` or `rewards/…`) appears in the first log dict" in fixed.output
    # The same hang again: the cause is found again, at its line; the earlier run works as well as its JSON.
    for against in (str(earlier), str(HANG)):
        again = runner.invoke(verify_command, ["--format", "json", "--against", against, str(HANG)])
        assert again.exit_code == 1
        gone = next(c for c in json.loads(again.output)["checks"] if c["name"] == f"cause_gone:{first_cause}")
        assert gone["passed"] is False and "train.log:" in gone["missing"]


def test_against_something_that_is_not_a_diagnosis_is_a_usage_error(tmp_path: Path) -> None:
    bogus = tmp_path / "other.json"
    bogus.write_text('{"hello": 1}', encoding="utf-8")
    result = CliRunner().invoke(verify_command, ["--against", str(bogus), str(CLEAN)])
    assert result.exit_code == 2
    assert "not a diagnosis written by `rltriage diagnose --format json`" in result.output
    missing = CliRunner().invoke(verify_command, ["--against", str(tmp_path / "nope.json"), str(CLEAN)])
    assert missing.exit_code == 2
