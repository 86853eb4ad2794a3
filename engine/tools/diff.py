"""`diff GOOD BAD`: what changed between a healthy run and a broken one.

Both runs are diagnosed with the same knowledge base. The report gives the first stage where their
boundaries diverge; the package, driver/CUDA/kernel, environment and config values that differ (the
knowledge base's contracts applied to changed config keys); failure-looking line templates found only
in the broken run; and the broken run's causes re-ranked by what changed: a cause whose rule reads a
changed value (in its conditions, its patch plan, its fix or its evidence to collect) moves up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..base.contract import Change, Divergence, Evidence, InputSummary, RerankedCause, RunDiff, ToolInfo, UnexplainedLine
from ..base.vocabulary import STAGE_ORDER, InputKind, PatchKind, Role, Stage
from ..infer.fact import Fact, as_evidence
from ..kb.knowledge import KnowledgeBase, LoadedRule
from ..kb.load import load_knowledge_base
from ..kb.models import Pattern
from ..pipeline.rank import combine
from ..pipeline.redact import redact_model
from ..pipeline.render import _STYLES, _tidy, environment
from ..pipeline.run import Analysis, analyse
from ..pipeline.scan import FAILURE_LINE, failure_template

DIFF_WEIGHT = 0.3  # noisy-or weight a cause gains when its rule reads a changed value
MAX_LINES = 15
MAX_CHANGES = 60
# Variables that differ between any two shells and say nothing about a run.
NOISY_ENV = re.compile(r"^(?:PWD|OLDPWD|HOSTNAME|HOST|SHLVL|_|TERM|TERM_\w+|SSH_\w+|LS_COLORS|TMUX\w*|STY|WINDOW|DISPLAY|XDG_\w+|"
                       r"SLURM_JOB_ID|SLURM_JOBID|SLURM_STEP\w*|SLURM_TASK_PID|SLURM_PROCID|SLURM_LOCALID|SLURM_NODEID|SLURM_TOPOLOGY\w*|"
                       r"PMI_\w+|OMPI_COMM_WORLD_\w+|RANK|LOCAL_RANK|GROUP_RANK|ROLE_RANK|TORCHELASTIC_\w+|MASTER_PORT|"
                       r"KUBERNETES_\w+|WANDB_RUN_ID|RAY_JOB_ID|.*(?:TOKEN|SECRET|PASSWORD|_KEY))$")


@dataclass(frozen=True)
class Value:
    value: str
    at: str | None
    reported: bool = False  # read from an environment report (pip freeze, collect_env, env dump)


def _at(fact: Fact) -> str | None:
    if fact.get("path") is not None and fact.get("line") is not None:
        return f"{fact.get('path')}:{fact.get('line')}"
    if fact.evidence:
        return f"{fact.evidence[0].path}:{fact.evidence[0].line}"
    return None


def _values(analysis: Analysis) -> dict[tuple[str, str], Value]:
    """Every comparable value of a run: (kind, name) -> value, the first found winning (config
    files before echoes in logs)."""
    out: dict[tuple[str, str], Value] = {}
    facts = analysis.inference.facts
    reports = {s.path for s in analysis.scans if s.kind is InputKind.env_report}
    configs = sorted((f for f in facts if f.type == "config"), key=lambda f: (f.get("source") != "file", f.id))
    for fact in configs:
        out.setdefault(("config", str(fact.get("key"))), Value(_text(fact.get("value")), _at(fact)))
    # Values from environment reports win over those read from log lines.
    for fact in sorted(facts, key=lambda f: (f.get("path") not in reports, f.id)):
        reported = fact.get("path") in reports
        if fact.type == "package" and fact.get("name"):
            out.setdefault(("package", str(fact.get("name")).lower()), Value(str(fact.get("version")), _at(fact), reported))
        elif fact.type == "system" and fact.get("name"):
            out.setdefault(("system", str(fact.get("name"))), Value(str(fact.get("value")), _at(fact), reported))
        elif fact.type == "kernel" and fact.get("version"):
            out.setdefault(("kernel", "kernel"), Value(str(fact.get("version")), _at(fact), reported))
        elif fact.type == "env" and fact.get("name") and not NOISY_ENV.match(str(fact.get("name"))):
            out.setdefault(("env", str(fact.get("name"))), Value(str(fact.get("value")), _at(fact), reported))
    return out


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_KIND_ORDER = {"package": 0, "system": 1, "kernel": 2, "env": 3, "config": 4}


def changed_values(good: Analysis, bad: Analysis) -> list[Change]:
    """Values present in both runs that differ, and values one run's environment report has that the
    other run's report of the same kind lacks (a package installed or removed, a variable set or
    unset). A value one log happens to print and the other does not says nothing, so it is left out."""
    g, b = _values(good), _values(bad)
    reported_g = {k for k, v in g.items() if v.reported}
    reported_b = {k for k, v in b.items() if v.reported}
    changes = []
    for key in sorted(set(g) | set(b), key=lambda k: (_KIND_ORDER[k[0]], k[1])):
        kind, name = key
        old, new = g.get(key), b.get(key)
        if old is not None and new is not None:
            if old.value == new.value:
                continue
        else:
            present, other = (old, reported_b) if old is not None else (new, reported_g)
            assert present is not None
            if kind == "config" or not present.reported or not any(k == kind for k, _n in other):
                continue
        changes.append(Change(kind=kind, name=name, good=old.value if old else None, bad=new.value if new else None,  # type: ignore[arg-type]
                              good_at=old.at if old else None, bad_at=new.at if new else None))
    return changes[:MAX_CHANGES]


# --- what a rule reads ----------------------------------------------------------------------------

_CFG_CALL = re.compile(r"""\b(?:cfg|cfg_key|cfg_at|has_cfg)\(\s*['"]([\w.]+)['"]""")
_PACKAGE_CALL = re.compile(r"""\bpackage\(\s*['"]([\w.\-]+)['"]""")
_ENV_NAME = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")


@dataclass(frozen=True)
class Read:
    kind: str
    name: str | None = None  # an exact name
    regex: str | None = None  # or a pattern over names

    def matches(self, change: Change) -> bool:
        if change.kind != self.kind:
            return False
        if self.kind == "kernel":
            return True
        if self.name is not None:
            if self.kind == "config":
                return change.name == self.name or change.name.endswith("." + self.name)
            return change.name.lower() == self.name.lower()
        return self.regex is not None and re.search(self.regex, change.name) is not None



def _pattern_reads(pattern: Pattern) -> Iterable[Read]:
    kinds = {"package": "package", "env": "env", "system": "system", "config": "config", "kernel": "kernel"}
    kind = kinds.get(pattern.fact)
    if kind is None:
        return
    if kind == "kernel":
        yield Read("kernel")
        return
    field_name = "key" if kind == "config" else "name"
    constraint: Any = pattern.where.get(field_name)
    if isinstance(constraint, str):
        yield Read(kind, name=constraint)
    elif isinstance(constraint, list):
        for item in constraint:
            if isinstance(item, str):
                yield Read(kind, name=item)
    elif constraint is not None:
        matches = getattr(constraint, "matches", None)
        if matches:
            yield Read(kind, regex=matches)
        for item in getattr(constraint, "one_of", None) or []:
            if isinstance(item, str):
                yield Read(kind, name=item)


def rule_reads(kb: KnowledgeBase, loaded: LoadedRule) -> list[Read]:
    """The values a rule reads: in its conditions, its patch plan, its fix and its collect entries."""
    model = loaded.model
    reads: list[Read] = []
    for _section, _index, pattern in model.when.patterns():
        reads.extend(_pattern_reads(pattern))
    for entry in model.collect:
        for pattern in [*entry.confirms, *entry.rules_out]:
            reads.extend(_pattern_reads(pattern))
    texts = [model.fix or ""]
    if model.fix_template:
        for folder in kb.template_dirs:
            path = folder / model.fix_template
            if path.is_file():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
                break
    for step in model.patch_plan:
        texts.extend((step.target, step.change))
        plain_target = step.target.strip()
        if "{" not in plain_target:
            if step.kind is PatchKind.env:
                reads.extend(Read("env", name=n) for n in _ENV_NAME.findall(plain_target))
            elif step.kind is PatchKind.package:
                reads.extend(Read("package", name=n) for n in re.findall(r"[A-Za-z][\w.\-]+", plain_target))
            elif step.kind is PatchKind.config and re.fullmatch(r"[\w.]+", plain_target):
                reads.append(Read("config", name=plain_target))
        elif step.kind is PatchKind.env:
            reads.extend(Read("env", name=n) for n in _ENV_NAME.findall(plain_target))
    for text in texts:
        reads.extend(Read("config", name=n) for n in _CFG_CALL.findall(text))
        reads.extend(Read("package", name=n) for n in _PACKAGE_CALL.findall(text))
        if "kernel" in text and "{{ kernel" in text:
            reads.append(Read("kernel"))
    return list(dict.fromkeys(reads))


# --- the pieces of the report ---------------------------------------------------------------------


def _named(change: Change) -> str:
    """`config trainer.max_steps`, `package vllm`; the kernel is one value and needs no name."""
    return change.kind if change.name == change.kind else f"{change.kind} {change.name}"



def _stages(analysis: Analysis) -> dict[Stage, Fact]:
    out: dict[Stage, Fact] = {}
    for fact in analysis.inference.facts_of("stage"):
        name = fact.get("name")
        if name in Stage.__members__:
            out.setdefault(Stage(name), fact)
    return out


def divergence(good: Analysis, bad: Analysis) -> Divergence:
    g, b = _stages(good), _stages(bad)
    first = next((stage for stage in sorted(g, key=lambda s: STAGE_ORDER[s]) if stage not in b), None)
    evidence: list[Evidence] = []
    if first is not None:
        evidence.extend(as_evidence(g[first].evidence[:1]))
    return Divergence(stage=first, good_last=good.diagnosis.boundary.last_completed, bad_last=bad.diagnosis.boundary.last_completed, evidence=evidence)


def _failure_templates(analysis: Analysis) -> dict[str, UnexplainedLine]:
    out: dict[str, UnexplainedLine] = {}
    seen: set[tuple[str, int]] = set()

    def add(template: str, count: int, evidence: Evidence) -> None:
        if (evidence.path, evidence.line) in seen:
            return
        seen.add((evidence.path, evidence.line))
        known = out.get(template)
        if known is None:
            out[template] = UnexplainedLine(template=template, count=count, evidence=evidence)
        else:
            out[template] = known.model_copy(update={"count": known.count + count})

    for scan in analysis.scans:
        for template, item in scan.unexplained.items():
            add(template, item.count, Evidence(path=scan.path, line=item.line, text=item.text, signature="unexplained"))
    for fact in analysis.inference.facts_of("hit"):
        text = str(fact.get("text") or "")
        if fact.evidence and FAILURE_LINE.search(text) and fact.get("dump") is None:
            add(failure_template(text), int(fact.get("count") or 1), fact.evidence[0].evidence())
    for fact in analysis.inference.facts_of("failure"):
        if fact.evidence and not fact.get("ignored"):
            add(failure_template(str(fact.get("text") or "")), int(fact.get("count") or 1), fact.evidence[0].evidence())
    return out


def new_failure_lines(good: Analysis, bad: Analysis) -> list[UnexplainedLine]:
    known = set(_failure_templates(good))
    fresh = [line for template, line in _failure_templates(bad).items() if template not in known]
    return sorted(fresh, key=lambda u: (-u.count, u.template))[:MAX_LINES]


def _contracts(kb: KnowledgeBase, change: Change, good: Analysis, bad: Analysis) -> list[str]:
    fired_bad = {f.rule for f in bad.inference.firings}
    fired_good = {f.rule for f in good.inference.firings}
    out = []
    for loaded in kb.rules:
        if loaded.model.role is not Role.contract:
            continue
        if not any(read.matches(change) for read in rule_reads(kb, loaded)):
            continue
        if loaded.id in fired_bad:
            state = "broken in the broken run" + ("" if loaded.id not in fired_good else " (and in the healthy run)")
        else:
            state = "holds"
        out.append(f"{loaded.id}: {state}")
    return out


def rerank(kb: KnowledgeBase, bad: Analysis, changes: list[Change]) -> tuple[list[RerankedCause], dict[int, list[str]]]:
    """The broken run's causes, a cause whose rule reads a changed value moved up."""
    by_change: dict[int, list[str]] = {}
    out = []
    for cause in bad.diagnosis.causes:
        loaded = kb.rule(cause.rule)
        reads = rule_reads(kb, loaded) if loaded is not None else []
        hit = [i for i, change in enumerate(changes) if any(r.matches(change) for r in reads)]
        for i in hit:
            by_change.setdefault(i, []).append(cause.rule)
        score = combine([cause.score, DIFF_WEIGHT]) if hit else cause.score
        out.append(RerankedCause(rule=cause.rule, bucket=cause.bucket, title=cause.title, score=score, diagnosis_score=cause.score,
                                 reads=[_named(changes[i]) for i in hit]))
    order = {c.rule: n for n, c in enumerate(bad.diagnosis.causes)}
    out.sort(key=lambda c: (-c.score, order[c.rule]))
    return out, by_change


def diff_runs(
    good: Sequence[str | os.PathLike[str]],
    bad: Sequence[str | os.PathLike[str]],
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    engine: str = "default",
    kb: KnowledgeBase | None = None,
    redact: bool = True,
    jobs: int = 1,
) -> tuple[RunDiff, Analysis, Analysis]:
    """Diagnose both runs and compare them. Raises InputError for a missing path."""
    kb = kb or load_knowledge_base(rules_dirs)
    good_run = analyse([os.fspath(p) for p in good], kb=kb, engine=engine, redact=False, jobs=jobs)
    bad_run = analyse([os.fspath(p) for p in bad], kb=kb, engine=engine, redact=False, jobs=jobs)
    changes = changed_values(good_run, bad_run)
    causes, by_change = rerank(kb, bad_run, changes)
    changes = [
        change.model_copy(update={"contracts": _contracts(kb, change, good_run, bad_run) if change.kind == "config" else [], "causes": by_change.get(i, [])})
        for i, change in enumerate(changes)
    ]
    # What a cause reads comes first among the changes: the likely culprit leads the list.
    changes.sort(key=lambda c: (not c.causes and not any("broken" in x for x in c.contracts), _KIND_ORDER[c.kind], c.name))
    result = RunDiff(
        tool=ToolInfo(version=__version__),
        good=[InputSummary(path=s.path, kind=s.kind, lines=s.lines) for s in good_run.scans],
        bad=[InputSummary(path=s.path, kind=s.kind, lines=s.lines) for s in bad_run.scans],
        divergence=divergence(good_run, bad_run),
        changes=changes,
        new_lines=new_failure_lines(good_run, bad_run),
        causes=causes,
        diagnosis=bad_run.diagnosis,
    )
    if redact:
        result = redact_model(result)
    return result, good_run, bad_run


def render_diff(kb: KnowledgeBase, result: RunDiff, fmt: str, colour: bool = False) -> str:
    if fmt == "json":
        return result.model_dump_json(indent=2) + "\n"
    template = environment(kb).get_template(f"report/diff.{'md' if fmt == 'markdown' else 'txt'}.j2")
    styles = _STYLES if colour else {k: "" for k in _STYLES}
    return _tidy(template.render(r=result, s=styles)) + "\n"
