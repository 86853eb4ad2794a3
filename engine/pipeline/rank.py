"""Stage 5 — rank: evidence weights into a score per cause, the symptom and the primary bucket."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.contract import Evidence, Suppressed
from ..base.vocabulary import STAGE_ORDER, STALL_BUCKETS, Bucket, Role, Stage, Symptom
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
    anchors: dict[str, set[tuple[str, int]]] = {}  # the line each firing of a cause's own rule is about
    for firing in inference.firings:
        if firing.cause is None or firing.weight is None:
            continue
        contributions.setdefault(firing.cause, {}).setdefault(firing.rule, firing.weight)
        if firing.rule == firing.cause and firing.cause not in first_bindings:
            first_bindings[firing.cause] = firing.bindings
        if firing.rule == firing.cause and firing.evidence:
            anchors.setdefault(firing.cause, set()).add((firing.evidence[0].path, firing.evidence[0].line))
        bucket = evidence.setdefault(firing.cause, [])
        for ev in firing.evidence:
            if len(bucket) < MAX_EVIDENCE and all((e.path, e.line) != (ev.path, ev.line) for e in bucket):
                bucket.append(ev.evidence())

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
    causes = _without_covered(kb, causes, anchors)
    _add_failure_context(inference, causes)
    _add_consequences(inference, causes)
    causes.sort(key=lambda c: (-c.score, _tier(kb, c.rule), -_priority(kb, c.rule), c.rule))

    symptom = _symptom(kb, inference, causes)
    primary: Bucket | None = None
    if symptom is Symptom.hang:
        stall = [c for c in causes if c.bucket in STALL_BUCKETS]
        primary = stall[0].bucket if stall else (Bucket.rollout_hang if causes else None)
    elif causes:
        primary = causes[0].bucket
    return Ranking(causes, symptom, primary, sorted(suppressed, key=lambda s: s.target), _choose_boundary(inference))


# Tiers of causes: what the knowledge base knows about a mechanism, then what the generic failure
# layer concludes from a failure's shape, then the fallback for a failure nothing recognises.
_TIERS = {Role.generic: 1, Role.fallback: 2}


def _tier(kb: KnowledgeBase, rule_id: str) -> int:
    loaded = kb.rule(rule_id)
    return _TIERS.get(loaded.model.role, 0) if loaded is not None else 0


def _priority(kb: KnowledgeBase, rule_id: str) -> int:
    loaded = kb.rule(rule_id)
    return loaded.model.priority if loaded is not None else 0


def _without_covered(kb: KnowledgeBase, causes: list[RankedCause], anchors: dict[str, set[tuple[str, int]]]) -> list[RankedCause]:
    """One failure, one explanation, the most specific: drop a generic cause whose every failure a
    specific cause already explains, and the fallback whenever any other cause explains the run (the
    failures it is about stay listed among the unexplained lines)."""
    cited: set[tuple[str, int]] = set()
    for cause in causes:
        if _tier(kb, cause.rule) == 0:
            cited.update((e.path, e.line) for e in cause.evidence)
    explained_elsewhere = any(_tier(kb, c.rule) < 2 for c in causes)
    kept = []
    for cause in causes:
        tier = _tier(kb, cause.rule)
        own = anchors.get(cause.rule, set())
        if tier == 1 and own and own <= cited:
            continue
        if tier == 2 and explained_elsewhere:
            continue
        kept.append(cause)
    return kept


def _add_failure_context(inference: Inference, causes: list[RankedCause]) -> None:
    """A cause that cites a failure's line also cites what locates it (its frames and code lines)."""
    by_line = {(f.get("path"), f.get("line")): f for f in inference.facts_of("failure")}
    for cause in causes:
        for ev in list(cause.evidence):
            failure = by_line.get((ev.path, ev.line))
            if failure is None:
                continue
            for extra in failure.evidence:
                if len(cause.evidence) < MAX_EVIDENCE and all((e.path, e.line) != (extra.path, extra.line) for e in cause.evidence):
                    cause.evidence.append(extra.evidence())


MAX_CONSEQUENCES = 2


def _add_consequences(inference: Inference, causes: list[RankedCause]) -> None:
    """A failure no cause cites is, where the logs say so, a consequence of one that does: a
    launcher's or a wrapper's report of a dead child belongs to the top cause, and a failure later
    in a file whose earlier lines a cause explains belongs to that cause (a process dies of its
    error). Cite it there, so that every failure a cause accounts for is shown with it."""
    if not causes:
        return
    cited = {(e.path, e.line) for c in causes for e in c.evidence}
    added: dict[int, int] = {}
    for failure in inference.facts_of("failure"):
        where = (failure.get("path"), failure.get("line"))
        if failure.get("ignored") or not failure.get("terminal") or where in cited:
            continue
        owner = causes[0] if failure.get("secondary") else next(
            (c for c in causes if any(e.path == where[0] and e.line < int(where[1] or 0) for e in c.evidence)), None
        )
        if owner is None or added.get(id(owner), 0) >= MAX_CONSEQUENCES or not failure.evidence:
            continue
        owner.evidence.append(failure.evidence[0].evidence())
        added[id(owner)] = added.get(id(owner), 0) + 1
        cited.add(where)


# Symptom facts of at least this weight decide the symptom; weaker ones (a crash inferred from a
# failure's shape alone) yield to the symptom the top cause's rule declares.
DECISIVE_SYMPTOM = 1.0


def _symptom(kb: KnowledgeBase, inference: Inference, causes: list[RankedCause]) -> Symptom:
    best: dict[bool, tuple[tuple[float, int], Symptom]] = {}
    for fact in inference.facts_of("symptom"):
        try:
            name = Symptom(fact.get("name"))
        except ValueError:
            continue
        weight = float(fact.get("weight") or 1.0)
        key = (weight, -SYMPTOM_PRECEDENCE.index(name) if name in SYMPTOM_PRECEDENCE else -99)
        decisive = weight >= DECISIVE_SYMPTOM
        if decisive not in best or key > best[decisive][0]:
            best[decisive] = (key, name)
    if True in best:
        return best[True][1]
    top = kb.rule(causes[0].rule) if causes else None
    if top is not None and top.model.symptom is not None:
        return top.model.symptom
    if False in best:
        return best[False][1]
    if not causes:
        return Symptom.none
    return Symptom.hang if causes[0].bucket in STALL_BUCKETS else Symptom.error_at_startup
