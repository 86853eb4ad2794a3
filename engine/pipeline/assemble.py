"""Assemble the diagnosis: the boundary with its proof, each cause with its rendered fix and patch
plan, verification lines, the smoke-test plan and the unexplained failure lines."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

from .._version import __version__
from ..base.contract import (
    Boundary,
    Cause,
    CollectItem,
    Diagnosis,
    Evidence,
    Failure,
    KnowledgeBasePack,
    PatchPlanStep,
    ToolInfo,
    UnexplainedLine,
    Warning_,
    input_summary,
)
from ..base.vocabulary import STALL_BUCKETS, PatchKind, Role, Stage, Symptom
from ..infer.fact import Fact, as_evidence
from ..infer.results import Inference
from ..inputs.discover import Warning
from ..kb.knowledge import KnowledgeBase
from ..kb.load import display_path, pack_origin
from .collect import Plan, plan
from .rank import RankedCause, Ranking
from .reduction import SMOKE_REDUCTION
from .render import ConfigView, render_fix, render_string, template_context
from .scan import FileScan

SUCCESS_CRITERIA = (
    "first GRPO step completes",
    "progress advances beyond 0%",
    "step time is logged",
    "reward pipeline runs at least once",
)


def _timestamps(scans: list[FileScan]) -> dict[tuple[str, int], float]:
    stamps: dict[tuple[str, int], float] = {}
    for scan in scans:
        for tally in scan.tallies.values():
            for record in (tally.first, *tally.samples, tally.last):
                if record is not None and record.timestamp is not None:
                    stamps[(scan.path, record.line)] = record.timestamp
    return stamps


MAX_STACK_PROOF = 3


def _stack_proof(inference: Inference) -> list[Evidence]:
    """Where the stuck threads are, from hang-time dumps: the odd process first, then one main
    thread per process."""
    proof: list[Evidence] = []
    for fact in inference.facts_of("stack_outlier"):
        proof.extend(as_evidence(fact.evidence))
    seen = {e.path for e in proof}
    for fact in inference.facts_of("stack"):
        if fact.get("dump") in ("traceback", "crash") or fact.get("path") in seen:
            continue
        seen.add(str(fact.get("path")))
        proof.extend(as_evidence(fact.evidence))
    return proof[:MAX_STACK_PROOF]


def _phase(inference: Inference) -> str | None:
    """Where the failure's frames place it: the furthest phase the failure-phase rules derived."""
    phases = inference.facts_of("failure_phase")
    if not phases:
        return None
    return str(max(phases, key=lambda f: (f.get("order") or 0, -f.id)).get("name"))


def _boundary(ranking: Ranking, scans: list[FileScan], inference: Inference) -> Boundary:
    fact = ranking.boundary
    if fact is None:
        return Boundary(evidence=_stack_proof(inference), phase=_phase(inference))
    last = fact.get("last_completed")
    missing = fact.get("first_missing")
    evidence = as_evidence(fact.evidence) + _stack_proof(inference)
    silent = None
    if evidence and ranking.symptom is Symptom.hang:  # silence only means something for a hang
        stamps = _timestamps(scans)
        stamped = [(stamps[(e.path, e.line)], e.path) for e in evidence if (e.path, e.line) in stamps]
        if stamped:
            start, path = max(stamped)
            end = next((s.last_timestamp for s in scans if s.path == path), None)
            if end is not None and end - start >= 1.0:  # less is no measurable silence (the log's last stamp is the proof's)
                silent = round(end - start, 1)
    return Boundary(
        last_completed=Stage(last) if last else None,
        first_missing=Stage(missing) if missing else None,
        evidence=evidence,
        silent_seconds=silent,
        phase=_phase(inference),
    )


def _cause(kb: KnowledgeBase, ranked: RankedCause, facts: list[Fact], warnings: list[Warning]) -> Cause:
    loaded = kb.rule(ranked.rule)
    assert loaded is not None
    context = template_context(ranked.bindings, facts)
    title = ranked.title
    try:
        if "{{" in title:
            title = render_string(kb, title, context)
        fix = render_fix(kb, loaded, context)
        steps = _shown_steps(
            [
                PatchPlanStep(kind=step.kind, target=render_string(kb, step.target, context), change=render_string(kb, step.change, context))
                for step in loaded.model.patch_plan
            ],
            facts,
        )
    except Exception as exc:  # noqa: BLE001 - a broken template must not lose the diagnosis
        warnings.append(Warning(loaded.origin.display, f"fix template failed to render: {exc}"))
        fix = loaded.model.fix or loaded.model.title
        steps = []
    return Cause(
        rule=ranked.rule,
        bucket=ranked.bucket,
        score=ranked.score,
        title=title,
        evidence=ranked.evidence,
        fix=fix,
        patch_plan=steps,
        blocking=ranked.blocking,
    )


_CONFIG_KEY = re.compile(r"[A-Za-z_][\w.\-]*")


def _shown_steps(steps: list[PatchPlanStep], facts: list[Fact]) -> list[PatchPlanStep]:
    """A patch plan proposes only what the run shows: a step whose target rendered empty is
    dropped, and so is a config step on a key that neither the config nor the logs show (the fix's
    prose names such a setting instead of inventing a `key: old -> new`)."""
    config = ConfigView([f for f in facts if f.type == "config"])
    kept = []
    for step in steps:
        if not step.target.strip() or not step.change.strip():
            continue
        if step.kind is PatchKind.config and _CONFIG_KEY.fullmatch(step.target) and not config.has(step.target):
            continue
        kept.append(step)
    return kept


def smoke_test_plan(facts: list[Fact]) -> list[PatchPlanStep]:
    """The smoke-test reduction written with the keys this run really uses."""
    config = ConfigView([f for f in facts if f.type == "config"])
    steps = []
    for item in SMOKE_REDUCTION:
        value = item.value
        key = next((k for k in item.keys if config.has(k)), None)
        if key is None:
            if item.always:
                steps.append(PatchPlanStep(kind=PatchKind.config, target=item.concept, change=f"set to {value}"))
            continue
        current = config.get(key)
        if str(current) == str(value):
            continue
        where = config.at(key)
        steps.append(PatchPlanStep(kind=PatchKind.config, target=config.key(key), change=f"{current} -> {value}" + (f" ({where})" if where else "")))
    smoke_keys = {key for item in SMOKE_REDUCTION for key in item.keys}
    config_files = sorted(
        {
            str(f.get("path"))
            for f in facts
            if f.type == "config" and f.get("source") == "file" and any(str(f.get("key")).endswith(k) for k in smoke_keys)
        }
    )
    for path in config_files[:1]:
        stem, dot, suffix = path.rpartition(".")
        smoke_path = f"{stem}.smoke.{suffix}" if dot else f"{path}.smoke"
        steps.append(PatchPlanStep(kind=PatchKind.command, target=path, change=f"rltriage smoke {path} -o {smoke_path} (writes the reduction with the batch contracts kept)"))
    if not config_files:
        steps.append(PatchPlanStep(kind=PatchKind.command, target="the run's config", change="rltriage smoke CONFIG -o CONFIG.smoke.yaml (writes the reduction with the batch contracts kept)"))
    steps.append(PatchPlanStep(kind=PatchKind.file, target="training dataset", change="limit to 1 prompt (e.g. dataset.select(range(1)))"))
    steps.append(PatchPlanStep(kind=PatchKind.file, target="reward functions", change="replace remote or heavy rewards with a cheap local stub (e.g. lambda completions, **kw: [0.0] * len(completions))"))
    return steps


MAX_UNEXPLAINED_REPORTED = 15


def unexplained_lines(scans: list[FileScan], explained: AbstractSet[tuple[str, int]] = frozenset()) -> list[UnexplainedLine]:
    """Failure-looking lines the knowledge base does not explain, most frequent first."""
    merged: dict[str, UnexplainedLine] = {}
    for scan in scans:
        for template, item in scan.unexplained.items():
            if (scan.path, item.line) in explained:
                continue
            known = merged.get(template)
            if known is None:
                evidence = Evidence(path=scan.path, line=item.line, text=item.text, signature="unexplained")
                merged[template] = UnexplainedLine(template=template, count=item.count, evidence=evidence)
            else:
                merged[template] = known.model_copy(update={"count": known.count + item.count})
    ranked = sorted(merged.values(), key=lambda u: (-u.count, u.template))
    return ranked[:MAX_UNEXPLAINED_REPORTED]


MAX_FAILURES_REPORTED = 10


def failures_seen(inference: Inference, top: Cause | None = None) -> list[Failure]:
    """The failures that ended something: the last exception of each chain, fatal signals and exit
    codes; those the top cause cites first, then in input order. Exceptions the program printed and
    ignored are left out."""
    cited = {(e.path, e.line) for e in top.evidence} if top is not None else set()
    out = []
    for fact in inference.facts_of("failure"):
        if fact.get("ignored") or not fact.get("terminal"):
            continue
        out.append(
            Failure(
                path=str(fact.get("path")),
                line=int(fact.get("line") or 0),
                process=fact.get("process"),
                type=str(fact.get("type")),
                message=str(fact.get("message") or ""),
                frame=fact.get("frame"),
                signal=fact.get("signal"),
            )
        )
    out.sort(key=lambda f: (f.path, f.line) not in cited)  # stable: input order within each group
    return out[:MAX_FAILURES_REPORTED]


def _explained_lines(kb: KnowledgeBase, ranking: Ranking, scans: list[FileScan]) -> set[tuple[str, int]]:
    """Lines a cause explains (the fallback for unrecognised failures explains nothing), and the
    frame and source lines of every traceback: they locate a failure, they are not one."""
    lines: set[tuple[str, int]] = set()
    for cause in ranking.causes:
        loaded = kb.rule(cause.rule)
        if loaded is not None and loaded.model.role is not Role.fallback:
            lines.update((e.path, e.line) for e in cause.evidence)
    for scan in scans:
        for failure in scan.failures:
            for frame in failure.frames:
                lines.add((scan.path, frame.log_line))
                if frame.code_line is not None:
                    lines.add((scan.path, frame.code_line))
            lines.update((scan.path, number) for number, _text in failure.context_lines)
    return lines


def collect_items(evidence_plan: Plan) -> list[CollectItem]:
    return [
        CollectItem(
            id=choice.item.id,
            title=choice.item.model.title,
            kind=choice.item.model.kind,
            command=choice.command,
            when=choice.when,
            score=choice.score,
            confirms=sorted({o.rule for o in choice.outcomes if o.polarity == "confirms"}),
            rules_out=sorted({o.rule for o in choice.outcomes if o.polarity == "rules_out"}),
            gaps=choice.gaps,
            reason=choice.reason,
        )
        for choice in evidence_plan.chosen
    ]


def build_diagnosis(
    kb: KnowledgeBase, scans: list[FileScan], inference: Inference, ranking: Ranking, warnings: list[Warning], mode: str = "diagnose"
) -> Diagnosis:
    facts = inference.facts
    causes = [_cause(kb, c, facts, warnings) for c in ranking.causes]
    preflight = mode == "preflight"
    if preflight:
        # Nothing ran yet: there is no symptom and no boundary, only contracts the config breaks.
        ranking = Ranking(ranking.causes, Symptom.none, causes[0].bucket if causes else None, ranking.suppressed, None)
    verification: list[str] = []
    if not preflight and (ranking.symptom in (Symptom.hang, Symptom.slow) or ranking.primary_bucket in STALL_BUCKETS):
        verification.extend(SUCCESS_CRITERIA)
    if causes:
        top = kb.rule(causes[0].rule)
        if top is not None:
            context = template_context(ranking.causes[0].bindings, facts)
            for line in top.model.verify:
                try:
                    verification.append(render_string(kb, line, context))
                except Exception as exc:  # noqa: BLE001
                    warnings.append(Warning(top.origin.display, f"verify line failed to render: {exc}"))
    verification = list(dict.fromkeys(verification))
    smoke = smoke_test_plan(facts) if ranking.symptom in (Symptom.hang, Symptom.slow) else []
    inputs = [input_summary(s.path, s.kind, s.lines) for s in scans]
    unexplained = unexplained_lines(scans, _explained_lines(kb, ranking, scans))
    evidence_plan = plan(kb, inference, ranking, scans, mode)
    return Diagnosis(
        tool=ToolInfo(version=__version__, knowledge_base=[KnowledgeBasePack(path=display_path(p), origin=pack_origin(p)) for p in kb.packs]),
        mode="preflight" if preflight else "diagnose",
        inputs=inputs,
        symptom=ranking.symptom,
        primary_bucket=ranking.primary_bucket,
        boundary=_boundary(ranking, scans, inference),
        causes=causes,
        failures=failures_seen(inference, causes[0] if causes else None),
        verification=verification,
        smoke_test=smoke,
        unexplained=unexplained,
        suppressed=ranking.suppressed,
        warnings=[Warning_(path=w.path, message=w.message) for w in warnings],
        collect=collect_items(evidence_plan),
        collect_reasons=evidence_plan.reasons if evidence_plan.shown else [],
    )
