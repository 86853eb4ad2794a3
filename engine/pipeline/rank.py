"""Stage 5 — rank: evidence weights into a score per cause, the symptom and the primary bucket."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.contract import Evidence, Suppressed
from ..base.vocabulary import STAGE_ORDER, STALL_BUCKETS, Bucket, Stage, Symptom
from ..infer.fact import Fact
from ..infer.results import Inference
from ..kb.knowledge import KnowledgeBase

MAX_EVIDENCE = 8
# When two symptoms are derived with the same weight, the more specific one wins.
SYMPTOM_PRECEDENCE = (Symptom.oom, Symptom.crash, Symptom.error_at_startup, Symptom.hang, Symptom.slow, Symptom.wrong_result)


@dataclass
class Contribution:
    rule: str
    weight: float


@dataclass
class RankedCause:
    rule: str
    bucket: Bucket
    score: float
    title: str
    evidence: list[Evidence]
    bindings: Mapping[str, Mapping[str, Any]]
    contributions: list[Contribution] = field(default_factory=list)
    blocking: bool = False


@dataclass
class Ranking:
    causes: list[RankedCause]
    symptom: Symptom
    primary_bucket: Bucket | None
    suppressed: list[Suppressed]
    boundary: Fact | None


def combine(weights: list[float]) -> float:
    """Noisy-OR of the positive weights, scaled down by each negative one; always in [0, 1]."""
    remaining = 1.0
    for w in weights:
        if w > 0:
            remaining *= 1.0 - w
    score = 1.0 - remaining
    for w in weights:
        if w < 0:
            score *= 1.0 + w
    return round(min(1.0, max(0.0, score)), 4)


def _choose_boundary(inference: Inference) -> Fact | None:
    boundaries = inference.facts_of("boundary")
    if not boundaries:
        return None

    def order(fact: Fact) -> int:
        last = fact.get("last_completed")
        return STAGE_ORDER.get(Stage(last), 0) if last in Stage.__members__ else 0

    return max(boundaries, key=lambda f: (order(f), -f.id))


def rank(kb: KnowledgeBase, inference: Inference) -> Ranking:
    contributions: dict[str, dict[str, float]] = {}
    evidence: dict[str, list[Evidence]] = {}
    first_bindings: dict[str, Mapping[str, Mapping[str, Any]]] = {}
    for firing in inference.firings:
        if firing.cause is None or firing.weight is None:
            continue
        contributions.setdefault(firing.cause, {}).setdefault(firing.rule, firing.weight)
        if firing.rule == firing.cause and firing.cause not in first_bindings:
            first_bindings[firing.cause] = firing.bindings
        bucket = evidence.setdefault(firing.cause, [])
        for ev in firing.evidence:
            if len(bucket) < MAX_EVIDENCE and all((e.path, e.line) != (ev.path, ev.line) for e in bucket):
                bucket.append(ev)

    suppressed_buckets: dict[str, tuple[str, str]] = {}
    suppressed_causes: dict[str, tuple[str, str]] = {}
    for record in inference.suppressions:
        if record.bucket:
            suppressed_buckets.setdefault(record.bucket, (record.rule, record.reason))
        if record.cause:
            suppressed_causes.setdefault(record.cause, (record.rule, record.reason))

    causes: list[RankedCause] = []
    suppressed: list[Suppressed] = []
    for cause_id, by_rule in contributions.items():
        if cause_id not in first_bindings:
            continue  # support without the cause's own rule firing does not make a cause
        loaded = kb.rule(cause_id)
        assert loaded is not None and loaded.model.bucket is not None
        model = loaded.model
        assert model.bucket is not None
        guard = suppressed_causes.get(cause_id) or suppressed_buckets.get(model.bucket.value)
        if guard is not None:
            suppressed.append(Suppressed(target=cause_id, reason=guard[1], rule=guard[0]))
            continue
        score = combine(list(by_rule.values()))
        if score <= 0:
            continue
        causes.append(
            RankedCause(
                rule=cause_id,
                bucket=model.bucket,
                score=score,
                title=model.title,
                evidence=evidence.get(cause_id, []),
                bindings=first_bindings[cause_id],
                contributions=[Contribution(r, w) for r, w in sorted(by_rule.items())],
                blocking=model.blocking,
            )
        )
    causes.sort(key=lambda c: (-c.score, -(kb.rule(c.rule).model.priority if kb.rule(c.rule) else 0), c.rule))  # type: ignore[union-attr]

    symptom = _symptom(kb, inference, causes)
    primary: Bucket | None = None
    if symptom is Symptom.hang:
        stall = [c for c in causes if c.bucket in STALL_BUCKETS]
        primary = stall[0].bucket if stall else (Bucket.rollout_hang if causes else None)
    elif causes:
        primary = causes[0].bucket
    return Ranking(causes, symptom, primary, sorted(suppressed, key=lambda s: s.target), _choose_boundary(inference))


def _symptom(kb: KnowledgeBase, inference: Inference, causes: list[RankedCause]) -> Symptom:
    best: tuple[float, int] | None = None
    chosen: Symptom | None = None
    for fact in inference.facts_of("symptom"):
        try:
            name = Symptom(fact.get("name"))
        except ValueError:
            continue
        weight = float(fact.get("weight") or 1.0)
        key = (weight, -SYMPTOM_PRECEDENCE.index(name) if name in SYMPTOM_PRECEDENCE else -99)
        if best is None or key > best:
            best, chosen = key, name
    if chosen is not None:
        return chosen
    if not causes:
        return Symptom.none
    top = kb.rule(causes[0].rule)
    if top is not None and top.model.symptom is not None:
        return top.model.symptom
    return Symptom.hang if causes[0].bucket in STALL_BUCKETS else Symptom.error_at_startup
