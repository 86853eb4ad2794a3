"""What to collect next: when the top causes are close, or the evidence is thin, the pieces of
evidence that would separate the hypotheses best, each with the command or setting that collects it.

Rules declare, in YAML, which facts would confirm or rule out their cause and which catalog item
(`collect/<id>.yaml`) collects them. An item scores by the pairs of hypotheses it separates: the same
observation confirming one and ruling out the other is worth most; an observation that would confirm
both is worth nothing. Items that fill a gap of a thin run (no environment report, no rank logs, …)
score a little on top, so they follow the discriminating items.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base.vocabulary import GAP_TEXT, LOG_KINDS, Gap, InputKind, Role, Symptom
from ..infer.fact import Fact
from ..infer.results import Inference
from ..infer.semantics import literal_match
from ..kb.compile import CompiledPattern, compile_pattern
from ..kb.knowledge import KnowledgeBase, LoadedItem
from ..kb.models import Pattern
from .rank import RankedCause, Ranking
from .render import environment
from .scan import FileScan

CLOSE_MARGIN = 0.1  # causes within this of the top score are hypotheses still to be separated
MAX_HYPOTHESES = 4
DECISIVE = 0.7  # a top cause below this score leaves the evidence thin
MAX_ITEMS = 5
GAP_BONUS = 0.25
# Points for a pair of hypotheses, by what the item would tell between them.
SPLIT_SAME_OBSERVATION = 2.0  # one observation confirms one and rules out the other
SPLIT_OPPOSITE = 1.5  # it could confirm one and rule out the other, through different observations
SPLIT_DIFFERENT = 1.0  # it would show different things under each
SPLIT_ONE_SIDED = 1.0  # it speaks about one of them only
_VERB = {"confirms": "confirm", "rules_out": "rule out"}  # what an item would do to the top cause
THIN_GAPS = (Gap.generic_cause, Gap.single_input, Gap.no_stage_proof, Gap.no_env_report, Gap.no_rank_logs)


@dataclass(frozen=True)
class Outcome:
    """What one hypothesis says an item would show."""

    rule: str
    polarity: str  # confirms | rules_out
    pattern: str
    note: str | None = None


@dataclass
class Choice:
    item: LoadedItem
    score: float
    outcomes: list[Outcome] = field(default_factory=list)
    pairs: list[tuple[str, str, float, str]] = field(default_factory=list)  # (a, b, points, why)
    gaps: list[Gap] = field(default_factory=list)
    command: str = ""
    when: str | None = None

    @property
    def reason(self) -> str:
        parts = []
        best = max((p for p in self.pairs if p[2] > 0), key=lambda p: p[2], default=None)
        if best is not None:
            a, b, _points, why = best
            parts.append(f"separates {a} from {b}: {why}" if b else f"{a}: {why}")
        if self.gaps:
            parts.append("fills a gap: " + "; ".join(GAP_TEXT[g] for g in self.gaps))
        return "; ".join(parts)


@dataclass
class Plan:
    hypotheses: list[RankedCause]
    close: bool
    gaps: list[Gap]
    chosen: list[Choice]
    skipped: list[tuple[str, str]]  # (item, why it was not chosen), for explain

    @property
    def shown(self) -> bool:
        return bool(self.chosen)

    @property
    def reasons(self) -> list[str]:
        out = []
        if self.close and len(self.hypotheses) > 1:
            ids = ", ".join(f"{c.rule} ({c.score:.2f})" for c in self.hypotheses)
            out.append(f"the top causes are close: {ids}")
        out.extend(GAP_TEXT[g] for g in self.gaps if g in THIN_GAPS)
        return out


def _compiled(pattern: Pattern) -> CompiledPattern:
    return compile_pattern(pattern)


def _matches(pattern: Pattern, inference: Inference) -> bool:
    compiled = _compiled(pattern)
    return any(literal_match(compiled, f) for f in inference.facts_of(compiled.type))


def _key(pattern: Pattern) -> str:
    return _compiled(pattern).describe()


# --- what the logs name, for the commands -------------------------------------------------------

_PID = re.compile(r"\bpid[=:]\s*(\d{2,7})\b|\bPID (\d{2,7})\b|\bpid(\d{2,7})\b")
_IP = re.compile(r"\bip[=:]\s*(\d{1,3}(?:\.\d{1,3}){3})\b")
_POD = re.compile(r"\bpods?[/ ]\"?([a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*)\"?")
_RANK = re.compile(r"^rank(\d+)$")
_DIGITS = re.compile(r"\d+")
_NODE_FIELDS = ("node", "host", "hostname", "nodename")


def run_names(facts: Sequence[Fact], scans: Sequence[FileScan]) -> dict[str, Any]:
    """Pids, ips, ranks, pods, nodes and config files the logs name: what a command is filled with."""
    pids: dict[str, None] = {}
    ips: dict[str, None] = {}
    pods: dict[str, None] = {}
    nodes: dict[str, None] = {}
    ranks: dict[int, None] = {}
    for fact in facts:
        texts = [str(fact.get("text") or "")] + [e.text for e in fact.evidence]
        for text in texts:
            # Searched only for the names whose words it holds (the regexes' literal parts): most
            # texts hold none, and a folder of many ranks gives thousands.
            if "pid" in text or "PID" in text:
                for match in _PID.finditer(text):
                    pids.setdefault(next(g for g in match.groups() if g))
            if "ip" in text:
                for match in _IP.finditer(text):
                    ips.setdefault(match.group(1))
            if fact.type == "hit" and "pod" in text:
                for match in _POD.finditer(text):
                    pods.setdefault(match.group(1))
        for name in ("pid",):
            if fact.get(name) is not None and str(fact.get(name)).isdigit():
                pids.setdefault(str(fact.get(name)))
        if fact.get("ip"):
            ips.setdefault(str(fact.get("ip")))
        if fact.get("pod"):
            pods.setdefault(str(fact.get("pod")))
        for name in _NODE_FIELDS:
            if fact.get(name):
                nodes.setdefault(str(fact.get(name)))
        rank = _RANK.match(str(fact.get("process") or ""))
        if rank and fact.type in ("failure", "stack"):
            ranks.setdefault(int(rank.group(1)))
        if fact.type == "failure" and str(fact.get("process") or "").startswith("pid"):
            pids.setdefault(str(fact.get("process"))[3:])
    # A rank has a log when a rank log's name holds its number as a whole run of digits (`rank12.log`
    # is rank 12's, not rank 1's): the runs are gathered once, not searched for every rank.
    numbers = {run for s in scans if s.kind is InputKind.rank_log for run in _DIGITS.findall(s.path.rsplit("/", 1)[-1])}
    missing = [r for r in ranks if str(r) not in numbers]
    configs = sorted({str(f.get("path")) for f in facts if f.type == "config" and f.get("source") == "file"})
    return {
        "pids": list(pids)[:16],
        "ips": list(ips)[:16],
        "pods": list(pods)[:8],
        "nodes": list(nodes)[:8],
        "ranks": sorted(ranks),
        "missing_ranks": sorted(missing),
        "configs": configs,
    }


# --- gaps ---------------------------------------------------------------------------------------


def evidence_gaps(kb: KnowledgeBase, inference: Inference, ranking: Ranking, scans: Sequence[FileScan], names: dict[str, Any]) -> list[Gap]:
    facts = inference.facts
    kinds = [s.kind for s in scans]
    logs = [k for k in kinds if k in LOG_KINDS]
    gaps: list[Gap] = []
    if len(scans) == 1 and len(logs) == 1:
        gaps.append(Gap.single_input)
    if ranking.boundary is None and not inference.facts_of("stage"):
        gaps.append(Gap.no_stage_proof)
    if ranking.causes:
        top = kb.rule(ranking.causes[0].rule)
        if top is not None and top.model.role in (Role.generic, Role.fallback):
            gaps.append(Gap.generic_cause)
    if not any(f.type in ("package", "system") for f in facts) and InputKind.env_report not in kinds:
        gaps.append(Gap.no_env_report)
    if names["missing_ranks"]:
        gaps.append(Gap.no_rank_logs)
    ray_driver = any(
        f.type == "hit" and str(f.get("signature") or "").startswith("ray.") or f.type == "failure" and str(f.get("wrapper") or "").startswith(("RayTaskError", "ActorDied"))
        for f in facts
    )
    if ray_driver and InputKind.ray_worker_err not in kinds:
        gaps.append(Gap.no_worker_logs)
    if ranking.symptom is Symptom.hang and not any(f.type == "stack" and f.get("dump") in ("pyspy", "faulthandler") for f in facts):
        gaps.append(Gap.no_stacks)
    if not any(f.type == "config" for f in facts):
        gaps.append(Gap.no_config)
    return gaps


# --- choosing -----------------------------------------------------------------------------------


def _pair_points(a: list[Outcome], b: list[Outcome]) -> tuple[float, str]:
    if not a and not b:
        return 0.0, ""
    if not a or not b:
        one = (a or b)[0]
        return SPLIT_ONE_SIDED, f"speaks about {one.rule} only"
    a_conf = {o.pattern for o in a if o.polarity == "confirms"}
    a_out = {o.pattern for o in a if o.polarity == "rules_out"}
    b_conf = {o.pattern for o in b if o.polarity == "confirms"}
    b_out = {o.pattern for o in b if o.polarity == "rules_out"}
    same = (a_conf & b_out) | (b_conf & a_out)
    if same:
        return SPLIT_SAME_OBSERVATION, f"the same observation ({min(sorted(same), key=len)}) confirms one and rules out the other"
    if (a_conf and b_out) or (b_conf and a_out):
        return SPLIT_OPPOSITE, "it can confirm one and rule out the other"
    if a_conf & b_conf:
        return 0.0, f"the same observation ({sorted(a_conf & b_conf)[0]}) would confirm both"
    if a_conf and b_conf:
        return SPLIT_DIFFERENT, "it would show different things under each"
    return SPLIT_DIFFERENT, "it would show different things under each"


def hypotheses_of(ranking: Ranking) -> tuple[list[RankedCause], bool]:
    if not ranking.causes:
        return [], False
    top = ranking.causes[0]
    close = [c for c in ranking.causes[:MAX_HYPOTHESES] if c.score >= top.score - CLOSE_MARGIN - 1e-9]
    return close, len(close) > 1


def render_command(kb: KnowledgeBase, text: str, names: dict[str, Any]) -> str:
    try:
        rendered = environment(kb).from_string(text).render(**names)
    except Exception:  # noqa: BLE001 - a broken catalog template must not lose the diagnosis
        return text
    return re.sub(r"\s+", " ", rendered).strip()


def plan(kb: KnowledgeBase, inference: Inference, ranking: Ranking, scans: Sequence[FileScan], mode: str = "diagnose") -> Plan:
    """The pieces of evidence to collect next, best first; empty when the diagnosis is decisive."""
    facts = inference.facts
    names = run_names(facts, scans)
    hypotheses, close = hypotheses_of(ranking)
    gaps = evidence_gaps(kb, inference, ranking, scans, names)
    top = ranking.causes[0] if ranking.causes else None
    weak = top is not None and (top.score < DECISIVE or Gap.generic_cause in gaps)
    unexplained_failure = top is None and any(f.get("terminal") and not f.get("ignored") for f in inference.facts_of("failure"))
    thin = weak or unexplained_failure
    if mode == "preflight" or not (close or thin):
        return Plan(hypotheses, close, gaps, [], [])
    if not thin:
        gaps = [g for g in gaps if g not in THIN_GAPS and g is not Gap.no_stacks]  # decisive causes that are close: only what separates them
    outcomes: dict[str, dict[str, list[Outcome]]] = {}  # item -> rule -> outcomes
    skipped: list[tuple[str, str]] = []
    for cause in hypotheses:
        loaded = kb.rule(cause.rule)
        if loaded is None:
            continue
        for entry in loaded.model.collect:
            for polarity in ("confirms", "rules_out"):
                for pattern in getattr(entry, polarity):
                    key = _key(pattern)
                    if _matches(pattern, inference):
                        skipped.append((entry.item, f"{cause.rule}: {polarity} {key} is already in the inputs"))
                        continue
                    outcomes.setdefault(entry.item, {}).setdefault(cause.rule, []).append(Outcome(cause.rule, polarity, key, entry.note))
    candidates = set(outcomes) | {i for i, item in kb.catalog.items() if item.model.gap in gaps}
    chosen: list[Choice] = []
    for item_id in sorted(candidates):
        item = kb.catalog.get(item_id)
        if item is None:
            continue
        if any(_matches(p, inference) for p in item.model.collected_when):
            skipped.append((item_id, "already in the inputs"))
            continue
        by_rule = outcomes.get(item_id, {})
        choice = Choice(item, 0.0, [o for rule in by_rule.values() for o in rule])
        if len(hypotheses) > 1:
            for i, a in enumerate(hypotheses):
                for b in hypotheses[i + 1 :]:
                    points, why = _pair_points(by_rule.get(a.rule, []), by_rule.get(b.rule, []))
                    if why:
                        choice.pairs.append((a.rule, b.rule, points, why))
                    choice.score += points * (a.score + b.score) / 2
        elif hypotheses:
            only = by_rule.get(hypotheses[0].rule, [])
            polarities = {o.polarity for o in only}
            if polarities:
                points = 2.0 if len(polarities) == 2 else 1.0
                choice.pairs.append((hypotheses[0].rule, "", points, "it would " + " or ".join(sorted(_VERB[p] for p in polarities)) + " the top cause"))
                choice.score += points * hypotheses[0].score
        if item.model.gap in gaps:
            choice.gaps.append(item.model.gap)  # type: ignore[arg-type]
            choice.score += GAP_BONUS
        if choice.score <= 0:
            skipped.append((item_id, "separates none of the hypotheses" + (f" ({choice.pairs[0][3]})" if choice.pairs else "")))
            continue
        choice.score = round(choice.score, 4)
        choice.command = render_command(kb, item.model.command, names)
        choice.when = render_command(kb, item.model.when, names) if item.model.when else None
        chosen.append(choice)
    chosen.sort(key=lambda c: (-c.score, c.item.model.cost, c.item.id))
    for extra in chosen[MAX_ITEMS:]:
        skipped.append((extra.item.id, f"ranked below the first {MAX_ITEMS}"))
    return Plan(hypotheses, close, gaps, chosen[:MAX_ITEMS], skipped)


def describe(plan_: Plan) -> Iterable[str]:
    """Why each item was chosen, for `explain`."""
    if not plan_.chosen:
        return
    yield "what to collect next (why each item was chosen):"
    for reason in plan_.reasons:
        yield f"  because {reason}"
    for position, choice in enumerate(plan_.chosen, start=1):
        yield f"  {position}. {choice.item.id} score {choice.score:.2f}: {choice.command}"
        for a, b, points, why in choice.pairs:
            pair = f"{a} vs {b}" if b else a
            yield f"     {pair}: +{points:.1f} × score — {why}"
        for outcome in choice.outcomes:
            note = f" ({outcome.note})" if outcome.note else ""
            yield f"     {outcome.rule} {outcome.polarity.replace('_', ' ')} on {outcome.pattern}{note}"
        for gap in choice.gaps:
            yield f"     +{GAP_BONUS:.2f} fills a gap: {GAP_TEXT[gap]}"
    for item_id, why in plan_.skipped:
        yield f"  not chosen: {item_id} — {why}"
