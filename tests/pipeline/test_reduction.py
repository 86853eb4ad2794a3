"""The smoke-test reduction table, shared by the diagnosis's plan and `rltriage smoke`."""

from __future__ import annotations

from rltriage.infer.fact import Fact
from rltriage.pipeline.assemble import smoke_test_plan
from rltriage.pipeline.reduction import COMPLETION_TOKENS, GROUP, SMOKE_REDUCTION, STEP_KEYS, reduction
from rltriage.tools.smoke import smoke_text


def test_the_table() -> None:
    assert GROUP == 2 and COMPLETION_TOKENS == 128
    assert STEP_KEYS[:3] == ("max_steps", "total_training_steps", "num_steps") and "max_train_steps" in STEP_KEYS
    assert [r.concept for r in SMOKE_REDUCTION if r.always] == ["num_generations", "max_completion_length", "max_steps"]
    assert reduction("eval_strategy").value == "no"


def test_the_plan_uses_the_runs_own_keys() -> None:
    facts = [
        Fact(0, "config", {"key": "actor_rollout_ref.rollout.n", "value": 8, "path": "ppo.yaml", "line": 4, "source": "file"}),
        Fact(1, "config", {"key": "trainer.max_train_steps", "value": 500, "path": "ppo.yaml", "line": 9, "source": "file"}),
    ]
    plan = {(s.target, s.change) for s in smoke_test_plan(facts)}
    assert ("actor_rollout_ref.rollout.n", "8 -> 2 (ppo.yaml:4)") in plan
    assert ("trainer.max_train_steps", "500 -> 1 (ppo.yaml:9)") in plan
    assert ("max_completion_length", "set to 128") in plan
    assert any(change.startswith("rltriage smoke ppo.yaml -o ppo.smoke.yaml") for _target, change in plan)


def test_smoke_rewrites_with_the_same_values() -> None:
    result = smoke_text("num_generations: 8\nmax_completion_length: 1024\nmax_steps: 500\n", name="grpo.yaml")
    changed = {c.key: c.new for c in result.changes}
    assert changed["num_generations"] == GROUP and changed["max_completion_length"] == COMPLETION_TOKENS and changed["max_steps"] == 1
