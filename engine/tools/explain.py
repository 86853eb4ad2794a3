"""`explain`: why a cause ranked where it did, and which rules nearly fired."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..base.text import printable
from ..base.vocabulary import Bucket
from ..infer.fact import Fact
from ..infer.results import Firing, Inference
from ..infer.semantics import check_passes, literal_match, negation_blocker, refs_complete, tests_pass
from ..kb.compile import CompiledPattern, CompiledRule
from ..pipeline.collect import describe, plan
from ..pipeline.rank import combine
from ..pipeline.redact import cut, redact
from ..pipeline.run import Analysis

# Facts every run has (the run itself, its inputs, the stage table): matching one says nothing
# about this run, so it does not make a rule a near miss.
BACKGROUND_FACTS = frozenset({"run", "input", "stage_def"})


@dataclass(frozen=True)
class NearMiss:
    rule: str
    bucket: str | None
    matched: int  # how many of the rule's patterns were satisfied before the one that failed
    lacked: str
    specific: int = 0  # of those, how many are about this run (not a fact every run has)


def _specific(rule: CompiledRule, upto: int) -> int:
    return sum(1 for slot in rule.slots[:upto] if not all(p.type in BACKGROUND_FACTS for p in slot))


def _miss(rule: CompiledRule, bucket: str | None, matched: int, lacked: str) -> NearMiss:
    return NearMiss(rule.id, bucket, matched, lacked, _specific(rule, matched))


def _describe_fact(fact: Fact) -> str:
    where = f" {fact.evidence[0].path}:{fact.evidence[0].line}" if fact.evidence else ""
    if fact.type == "hit":
        return printable(f"hit {fact.get('signature')}{where}")
    fields = ", ".join(f"{k}={v}" for k, v in sorted(fact.fields.items()) if k not in ("path", "line", "text"))
    return printable(f"{fact.type}({fields}){where}")


def _partial(rule: CompiledRule, facts: list[Fact], upto: int) -> Iterator[dict[str, Fact]]:
    def extend(position: int, bound: dict[str, Fact]) -> Iterator[dict[str, Fact]]:
        if position == upto:
            yield dict(bound)
            return
        for pattern in rule.slots[position]:
            for fact in facts:
                if literal_match(pattern, fact) and refs_complete_or_unbound(pattern, fact, bound):
                    bound[pattern.alias] = fact
                    yield from extend(position + 1, bound)
                    del bound[pattern.alias]

    yield from extend(0, {})


def refs_complete_or_unbound(pattern: CompiledPattern, fact: Fact, bound: dict[str, Fact]) -> bool:
    return all(check_passes(c, fact, bound) is not False for c in pattern.ref_checks)


def near_miss(rule: CompiledRule, inference: Inference) -> NearMiss | None:
    """The first condition of an unfired rule that no combination of facts satisfied."""
    facts = inference.facts
    bucket = rule.model.bucket.value if rule.model.bucket else None
    for position, slot in enumerate(rule.slots):
        if not any(literal_match(p, f) for p in slot for f in facts):
            wanted = " or ".join(p.describe() for p in slot)
            return _miss(rule, bucket, position, f"no fact {wanted}")
        if next(_partial(rule, facts, position + 1), None) is None:
            wanted = " or ".join(p.describe() for p in slot)
            return _miss(rule, bucket, position, f"no {wanted} consistent with the facts matched before it")
    complete = [b for b in _partial(rule, facts, len(rule.slots)) if all(refs_complete(p, b[p.alias], b) for s in rule.slots for p in s if p.alias in b)]
    if not complete:
        return _miss(rule, bucket, len(rule.slots), "references between the matched facts do not agree")
    for negative in rule.negatives:
        blockers = [negation_blocker(facts, negative, b) for b in complete]
        if all(blockers):
            blocker = blockers[0]
            assert blocker is not None
            return _miss(rule, bucket, len(rule.slots), f"blocked by none: {negative.describe()} — found {_describe_fact(blocker)}")
    for bound in complete:
        ok, failed = tests_pass(rule, bound)
        if not ok:
            return _miss(rule, bucket, len(rule.slots), f"test was false: {failed}")
    return None


def _chain(firing: Firing, inference: Inference, depth: int, seen: set[int], lines: list[str]) -> None:
    by_id = {f.id: f for f in inference.facts}
    producers = {fact_id: f for f in inference.firings for fact_id in f.derived}
    lines.append("  " * depth + f"- rule {firing.rule} fired on:")
    for fact_id in firing.facts:
        fact = by_id[fact_id]
        lines.append("  " * (depth + 1) + f"· {_describe_fact(fact)}")
        producer = producers.get(fact_id)
        if producer is not None and fact_id not in seen:
            seen.add(fact_id)
            _chain(producer, inference, depth + 2, seen, lines)


def explain(analysis: Analysis, cause: str | None = None, bucket: str | None = None, redacting: bool = True) -> str:
    """The ranking explained as text; secrets redacted (unless `redacting` is off) before anything is
    cut. Raises ValueError for a cause id no rule has or an unknown bucket."""
    inference = analysis.inference
    program = analysis.kb.program
    if cause is not None and not any(rule.id == cause for rule in program.rules):
        raise ValueError(f"no rule '{cause}' in the knowledge base (`rltriage rules list` shows the ids)")
    if bucket is not None and bucket not in {b.value for b in Bucket}:
        raise ValueError(f"unknown bucket '{bucket}'; one of {', '.join(b.value for b in Bucket)}")
    lines: list[str] = []
    ranked = analysis.ranking.causes
    targets = [c for c in ranked if (cause is None or c.rule == cause) and (bucket is None or c.bucket.value == bucket)]
    if cause is None and bucket is None:
        targets = ranked[:3]
    for position, item in enumerate(ranked, start=1):
        if item not in targets:
            continue
        lines.append(f"#{position} {item.rule} [{item.bucket.value}] score {item.score:.2f}")
        weights = [c.weight for c in item.contributions]
        parts = " + ".join(f"{c.rule} ({c.weight:+.2f})" for c in item.contributions)
        lines.append(f"  score = noisy-or of {parts} = {combine(weights):.2f}")
        for contribution in item.contributions:
            firing = next(f for f in inference.firings if f.cause == item.rule and f.rule == contribution.rule)
            _chain(firing, inference, 1, set(), lines)
        for ev in item.evidence:
            lines.append(f"  evidence {printable(ev.path)}:{ev.line}  {printable(cut(ev.text.strip(), 160))}")
        lines.append("")
    if cause is not None and not targets:
        lines.append(f"{cause} is not among the ranked causes.")
    for record in analysis.ranking.suppressed:
        # Every guard is shown under --bucket: a suppressed cause no longer has a bucket to filter on.
        if cause is None or record.target == cause:
            lines.append(f"guard {record.rule} suppressed {record.target}: {printable(record.reason)}")
    fired = {f.rule for f in inference.firings}
    misses = []
    for rule in program.rules:
        if rule.id in fired or not rule.model.concludes:
            continue
        if cause is not None and rule.id != cause:
            continue
        if bucket is not None and (rule.model.bucket is None or rule.model.bucket.value != bucket):
            continue
        miss = near_miss(rule, inference)
        # Unasked, a rule is a near miss only when something about this run matched it.
        if miss is not None and (miss.specific or cause is not None or bucket is not None):
            misses.append(miss)
    misses.sort(key=lambda m: (-m.specific, -m.matched, m.rule))
    if misses:
        lines.append("")
        lines.append("near misses (rules that did not fire, and the one condition they lacked):")
        for miss in misses[:12]:
            lines.append(f"  {miss.rule} [{miss.bucket}] matched {miss.matched} pattern(s); lacked: {miss.lacked}")
    if cause is None and bucket is None:
        evidence_plan = plan(analysis.kb, inference, analysis.ranking, analysis.scans, analysis.diagnosis.mode)
        described = list(describe(evidence_plan))
        if described:
            lines.append("")
            lines.extend(printable(line) for line in described)
    text = "\n".join(lines).rstrip() + "\n"
    # Line by line: a key block cut off in one evidence line must not swallow the lines after it.
    return "\n".join(redact(line) for line in text.split("\n")) if redacting else text
