"""Ranking: noisy-OR scores, guards, the symptom and the primary bucket."""

from __future__ import annotations

import pytest

from rltriage.base.vocabulary import Bucket, Symptom
from rltriage.infer.fact import Cited, Fact
from rltriage.infer.results import Firing, Inference, SuppressionRecord
from rltriage.kb.knowledge import KnowledgeBase
from rltriage.pipeline.rank import combine, rank

EV = Cited(path="train.log", line=20, text="reward_started", signature="rltriage.stage_marker")


def _firing(rule: str, weight: float, cause: str | None = None) -> Firing:
    return Firing(rule, 0, (0,), {}, (), weight, cause or rule, (EV,))


def test_noisy_or() -> None:
    assert combine([0.5, 0.5]) == 0.75
    assert combine([0.8, -0.5]) == 0.4
    assert combine([-1.0]) == 0.0 and combine([1.0, 0.3]) == 1.0


def test_causes_are_scored_guarded_and_ordered(kb: KnowledgeBase) -> None:
    firings = [
        _firing("trl.reward_never_returned", 0.7),
        _firing("reward.started_without_finish", 0.2, "trl.reward_never_returned"),
        _firing("memory.cuda_oom", 0.9),
        _firing("lego.reward_flat_lr_zero", 0.9),
        # Support for a cause whose own rule did not fire does not make a cause.
        _firing("vllm.engine_death_not_reward", 0.5, "vllm.engine_core_died"),
    ]
    facts = [Fact(0, "symptom", {"name": "hang", "weight": 1})]
    guard = SuppressionRecord("core.guard_reward_shaping", "training_signal", None, "no step completed", ())
    ranking = rank(kb, Inference(facts, firings, [guard]))
    assert [c.rule for c in ranking.causes] == ["memory.cuda_oom", "trl.reward_never_returned"]
    assert ranking.causes[1].score == pytest.approx(combine([0.7, 0.2]))
    assert [c.rule for c in ranking.causes[1].contributions] == ["reward.started_without_finish", "trl.reward_never_returned"]
    assert [(s.target, s.rule) for s in ranking.suppressed] == [("lego.reward_flat_lr_zero", "core.guard_reward_shaping")]
    # A hang's primary bucket is a stall bucket, even when an OOM cause ranks higher.
    assert ranking.symptom is Symptom.hang and ranking.primary_bucket is Bucket.vram_pressure


def test_the_heaviest_symptom_wins(kb: KnowledgeBase) -> None:
    facts = [Fact(0, "symptom", {"name": "hang", "weight": 1}), Fact(1, "symptom", {"name": "oom", "weight": 3})]
    ranking = rank(kb, Inference(facts, [_firing("trl.reward_never_returned", 0.7)], []))
    assert ranking.symptom is Symptom.oom and ranking.primary_bucket is Bucket.reward_blocking
    assert rank(kb, Inference([], [], [])).symptom is Symptom.none
