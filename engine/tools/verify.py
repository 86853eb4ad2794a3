"""`rltriage verify`: check a rerun against the success criteria of a first GRPO step.

Four criteria hold for every run (first step completes, progress beyond 0%, step time logged,
reward ran); a fifth fails on any failure of the rerun (an uncaught exception, a C++ termination, a
fatal signal, an exit code, or a crash / out-of-memory the knowledge base recognises). Given the
earlier diagnosis (`against`), one more check per cause it ranked first: that cause is no longer
found. They are proven from the same facts a diagnosis rests on: `stage` facts the rules derive and `hit` facts of the signatures. Step time and
the reward of trainers without a stage rule for it (verl, the disaggregated trainers) are read from
the evidence lines of those facts, so no new signatures are needed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from ..base.contract import Diagnosis
from ..base.markers import BAR_COUNT, MARKER_SIGNATURE, step_markers
from ..base.vocabulary import Symptom
from ..infer.fact import Cited, Fact
from ..pipeline.assemble import SUCCESS_CRITERIA
from ..pipeline.redact import cut, finish_model
from ..pipeline.run import analyse

CHECK_NAMES = ("first_step_completed", "progress_advanced", "step_time_logged", "reward_computed", "no_failure")
NO_FAILURE = "the run ends without an uncaught exception, fatal signal, crash or out-of-memory"
# A diagnosis with one of these symptoms found a failure, not only a slow path or a config contract.
_FAILED_SYMPTOMS = (Symptom.crash, Symptom.oom, Symptom.error_at_startup)
_MAX_EVIDENCE = 3
_MAX_TEXT = 200


class VerifyEvidence(BaseModel):
    path: str
    line: int
    text: str
    detail: str | None = None

    def location(self) -> str:
        return f"{self.path}:{self.line}"


class VerifyCheck(BaseModel):
    name: str
    criterion: str
    passed: bool
    evidence: list[VerifyEvidence] = Field(default_factory=list)
    missing: str | None = None


class VerifyResult(BaseModel):
    passed: bool
    checks: list[VerifyCheck]
    inputs: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # What the earlier diagnosis also asks to confirm, in its own words; not checked automatically.
    also_confirm: list[str] = Field(default_factory=list)


# A tqdm bar past step 0 with its rate; `?it/s` (no step finished yet) never matches.
_TQDM_RATE = re.compile(BAR_COUNT + r"[^\]]*?,\s*(?P<rate>\d+(?:\.\d+)?)\s*(?P<unit>s/it|it/s)\]")
# Step-time metrics as trainers print them: `timing_s/step:571.9` (verl), `'train/step_time_s': 171.2`
# (disaggregated), `step_time=3.2`, `'train_runtime': 840.2` (HF summary, total time of the run).
_METRIC = re.compile(
    r"(?<![\w-])(?P<key>timing_s/step|(?:[\w-]+/)*step_time(?:_s|_sec|_seconds)?|time/step|train_runtime)"
    r"['\"]?\s*[:=]\s*['\"]?(?P<value>\d+(?:\.\d+)?(?:e[-+]?\d+)?)",
    re.IGNORECASE,
)
# Training reward keys of TRL log dicts, verl metric lines and the disaggregated step dicts; val-*
# metrics (`val-core/…/reward/mean@1`) do not match, validation is not the training reward pipeline.
_REWARD = re.compile(
    r"(?<![\w-])(?P<key>critic/(?:score|rewards)/mean|(?:train/)?reward(?:s/[\w.-]+?/mean|_mean)?|reward mean)"
    r"['\"]?\s*[:=]\s*['\"]?(?P<value>-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan)",
    re.IGNORECASE,
)
# A trainer's own tqdm bar with a description (verl `Training Progress:`), unlike model-loading bars.
_TRAINING_BAR = re.compile(r"(?:Training|train|steps?)\b[^|]*:\s*\d{1,3}%\|", re.IGNORECASE)
# A training metric on a step line; a verl `step:0 - val-core/…` line of a val_only run has none.
_TRAIN_KEY = re.compile(r"(?<![\w/-])(?:actor|critic|training|train)/[\w@/.-]+['\"]?\s*:")
_BAR = re.compile(r"\|\s*" + BAR_COUNT)
# A completed step of trainers whose step lines carry the step number: verl `step:3 - …`,
# the disaggregated `step 28 | {…}` and `step 0: policy update done`.
_STEP_LINE = re.compile(r"(?<![\w/])step[: ](?P<step>\d+)(?: - | \| \{|: policy update done)")


def _evidence(ev: Cited, detail: str | None = None) -> VerifyEvidence:
    text = ev.text.strip()
    if len(text) > _MAX_TEXT:
        text = cut(text, _MAX_TEXT - 1) + "…"
    return VerifyEvidence(path=ev.path, line=ev.line, text=text, detail=detail)


def _sorted(evidence: Iterable[Cited]) -> list[Cited]:
    unique = {(e.path, e.line): e for e in evidence}
    return [unique[k] for k in sorted(unique)]


def _proof_rank(ev: Cited) -> int:
    """How directly a line proves a stage: an explicit marker, then a per-step log line, then a bar."""
    signature = ev.signature or ""
    if signature == MARKER_SIGNATURE:
        return 0
    if signature == "hf.progress_bar":
        return 2
    if signature.startswith(("python.", "config:")):
        return 3
    return 1


def _stage_proof(stage: Fact) -> list[VerifyEvidence]:
    usable = []
    for ev in _sorted(stage.evidence):
        # The engine cites a progress-bar tally whole, including its `0/N` start, which proves nothing.
        if ev.signature == "hf.progress_bar" and max((int(m.group(1)) for m in _BAR.finditer(ev.text)), default=0) == 0:
            continue
        usable.append(ev)
    usable.sort(key=lambda e: (_proof_rank(e), e.path, e.line))
    return [_evidence(e) for e in usable[:_MAX_EVIDENCE]]


def _hits(facts: list[Fact], *signatures: str) -> list[Fact]:
    return [f for f in facts if f.type == "hit" and (not signatures or f.get("signature") in signatures)]


def _stage(facts: list[Fact], name: str) -> Fact | None:
    return next((f for f in facts if f.type == "stage" and f.get("name") == name), None)


def _first_step(facts: list[Fact], boundary: Fact | None) -> VerifyCheck:
    criterion = SUCCESS_CRITERIA[0]
    stage = _stage(facts, "first_step_completed")
    proof = _stage_proof(stage) if stage is not None else []
    if proof:
        return VerifyCheck(name=CHECK_NAMES[0], criterion=criterion, passed=True, evidence=proof)
    missing = "no completed trainer step in the logs (no trainer log dict, step-metric line, progress bar past 0 or step_completed marker)"
    if boundary is not None and boundary.get("last_completed"):
        missing += f"; the run got as far as {boundary.get('last_completed')}"
        if boundary.get("first_missing"):
            missing += f" and {boundary.get('first_missing')} never returned"
        where = _sorted(boundary.evidence)[:1]
        if where:
            missing += f" ({where[0].path}:{where[0].line})"
    return VerifyCheck(name=CHECK_NAMES[0], criterion=criterion, passed=False, missing=missing)


def _progress(facts: list[Fact]) -> VerifyCheck:
    criterion = SUCCESS_CRITERIA[1]
    found: list[VerifyEvidence] = []
    last_bar: Cited | None = None
    for hit in _hits(facts, "hf.progress_bar"):
        for ev in _sorted(hit.evidence):
            # A redrawn bar holds several states on one line; the furthest one is where it got to.
            bars = [(int(m.group(1)), m.group(2)) for m in _BAR.finditer(ev.text)]
            furthest = max(bars, default=(0, "?"))
            if furthest[0] > 0:
                found.append(_evidence(ev, f"step {furthest[0]}/{furthest[1]}"))
            else:
                last_bar = ev
    for hit in _hits(facts):
        for ev in _sorted(hit.evidence):
            marker = next((m for m in step_markers(ev.text) if m.group("step") is not None), None)
            line = _STEP_LINE.search(ev.text)
            if marker:
                step = int(marker.group("step"))
                # The marker's step counts finished steps: step=1 is the first one done.
                if step >= 1:
                    found.append(_evidence(ev, f"step {step} completed"))
            elif line and hit.get("signature") != "hf.progress_bar" and (_TRAIN_KEY.search(ev.text) or "policy update done" in ev.text):
                # verl numbers its first step 1; the disaggregated trainers number it 0. Either way a
                # metric line for a step means that step finished and the counter moved on.
                found.append(_evidence(ev, f"step {line.group('step')} completed"))
    unique: dict[tuple[str, int], VerifyEvidence] = {}
    for item in found:
        unique.setdefault((item.path, item.line), item)
    if unique:
        return VerifyCheck(name=CHECK_NAMES[1], criterion=criterion, passed=True, evidence=[unique[k] for k in sorted(unique)][:_MAX_EVIDENCE])
    if last_bar is not None:
        missing = f"the progress bar never left 0 ({last_bar.path}:{last_bar.line}: {cut(last_bar.text.strip(), _MAX_TEXT)})"
    else:
        missing = "no progress bar past 0, no step metric line and no step_completed marker in the logs"
    return VerifyCheck(name=CHECK_NAMES[1], criterion=criterion, passed=False, missing=missing)


def step_time_in(text: str, trainer_bar: bool = True) -> tuple[int, str] | None:
    """The step time a log line carries, as (preference, description); lower preference wins.

    A per-step figure (marker, step metric) beats a tqdm rate, which beats the run's total runtime.
    `trainer_bar` says the line is the trainer's own progress bar: a rate on any other bar
    (checkpoint shards, vLLM prompts) times something else.
    """
    marker = next((m for m in step_markers(text) if m.group("seconds") is not None), None)
    if marker:
        return 0, f"{marker.group('seconds')} s for step {marker.group('step') or '?'} (stage marker)"
    metric = None
    for match in _METRIC.finditer(text):
        if match.group("key").lower() != "train_runtime":
            metric = match
            break
    if metric:
        return 1, f"{metric.group('key')} = {metric.group('value')} s"
    rates = [m for m in _TQDM_RATE.finditer(text) if int(m.group("n")) > 0] if trainer_bar or _TRAINING_BAR.search(text) else []
    if rates:
        last = rates[-1]
        return 2, f"{last.group('rate')} {last.group('unit')} at step {last.group('n')}/{last.group('m')}"
    for match in _METRIC.finditer(text):
        return 3, f"{match.group('key')} = {match.group('value')} s (whole run)"
    return None


def _step_time(facts: list[Fact]) -> VerifyCheck:
    criterion = SUCCESS_CRITERIA[2]
    candidates: list[tuple[int, str, int, VerifyEvidence]] = []
    seen: set[tuple[str, int]] = set()
    for fact in facts:
        if fact.type not in ("hit", "stage", "stage_seen"):
            continue
        for ev in fact.evidence:
            if (ev.path, ev.line) in seen:
                continue
            seen.add((ev.path, ev.line))
            found = step_time_in(ev.text, trainer_bar=fact.type == "hit" and fact.get("signature") == "hf.progress_bar")
            if found is not None:
                candidates.append((found[0], ev.path, ev.line, _evidence(ev, found[1])))
    if candidates:
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
        return VerifyCheck(name=CHECK_NAMES[2], criterion=criterion, passed=True, evidence=[c[3] for c in candidates[:_MAX_EVIDENCE]])
    missing = (
        "no step time in the logs: no tqdm rate (s/it or it/s) on a bar past 0, no step_time / timing_s/step / "
        "train_runtime metric, no `[rltriage] stage=step_completed … seconds=X` marker"
    )
    return VerifyCheck(name=CHECK_NAMES[2], criterion=criterion, passed=False, missing=missing)


def _reward(facts: list[Fact], boundary: Fact | None) -> VerifyCheck:
    criterion = SUCCESS_CRITERIA[3]
    stage = _stage(facts, "reward_computed")
    proof = _stage_proof(stage) if stage is not None else []
    if proof:
        return VerifyCheck(name=CHECK_NAMES[3], criterion=criterion, passed=True, evidence=proof)
    found: dict[tuple[str, int], VerifyEvidence] = {}
    for hit in _hits(facts):
        for ev in _sorted(hit.evidence):
            # A reward *value* proves the reward ran; `stage=reward_started` alone does not.
            match = _REWARD.search(ev.text)
            if match and (ev.path, ev.line) not in found:
                found[(ev.path, ev.line)] = _evidence(ev, f"{match.group('key')} = {match.group('value')}")
    if found:
        return VerifyCheck(name=CHECK_NAMES[3], criterion=criterion, passed=True, evidence=[found[k] for k in sorted(found)][:_MAX_EVIDENCE])
    missing = "no reward in the logs (no reward_computed marker, no 'reward' in a log dict, no critic/score/mean or reward_mean step metric)"
    started = [h for h in _hits(facts, MARKER_SIGNATURE) if h.get("stage") == "reward_started"]
    if started and started[0].evidence:
        ev = _sorted(started[0].evidence)[0]
        missing += f"; the reward started at {ev.path}:{ev.line} and never returned"
    elif boundary is not None and boundary.get("first_missing") == "reward_computed":
        missing += "; the reward stage is where the run stopped"
    return VerifyCheck(name=CHECK_NAMES[3], criterion=criterion, passed=False, missing=missing)


def _cited(path: str, line: int, text: str) -> VerifyEvidence:
    text = text.strip()
    return VerifyEvidence(path=path, line=line, text=cut(text, _MAX_TEXT - 1) + "…" if len(text) > _MAX_TEXT else text)


def _no_failure(diagnosis: Diagnosis) -> VerifyCheck:
    """Fails on the rerun's first failure, or on a crash / OOM cause the knowledge base concluded."""
    if diagnosis.failures:
        first = diagnosis.failures[0]
        what = f"{first.type}: {first.message}" if first.message else first.type
        more = f" (and {len(diagnosis.failures) - 1} more)" if len(diagnosis.failures) > 1 else ""
        where = f" in {first.process}" if first.process else ""
        return VerifyCheck(
            name=CHECK_NAMES[4], criterion=NO_FAILURE, passed=False,
            evidence=[_cited(first.path, first.line, what)], missing=f"{first.path}:{first.line}: {cut(what, _MAX_TEXT)}{where}{more}",
        )
    if diagnosis.symptom in _FAILED_SYMPTOMS:
        cause = next((c for c in diagnosis.causes if c.evidence and not c.blocking), None)
        if cause is not None:
            ev = cause.evidence[0]
            return VerifyCheck(
                name=CHECK_NAMES[4], criterion=NO_FAILURE, passed=False, evidence=[_cited(ev.path, ev.line, ev.text)],
                missing=f"{ev.path}:{ev.line}: {cause.title} ({cause.rule}; symptom {diagnosis.symptom.value})",
            )
    return VerifyCheck(name=CHECK_NAMES[4], criterion=NO_FAILURE, passed=True)


def _cause_gone(earlier: Diagnosis, rerun: Diagnosis) -> list[VerifyCheck]:
    """One check per cause the earlier diagnosis ranked first (ties included): it is not found again."""
    if not earlier.causes:
        return []
    top = earlier.causes[0].score
    checks = []
    for cause in (c for c in earlier.causes if c.score == top):
        criterion = f"the diagnosed cause is gone: {cause.title} ({cause.rule})"
        again = next((c for c in rerun.causes if c.rule == cause.rule), None)
        if again is None:
            checks.append(VerifyCheck(name=f"cause_gone:{cause.rule}", criterion=criterion, passed=True))
            continue
        ev = again.evidence[0] if again.evidence else None
        missing = f"{cause.rule} is found again" + (f" at {ev.path}:{ev.line}: {cut(ev.text.strip(), _MAX_TEXT)}" if ev else "")
        checks.append(
            VerifyCheck(
                name=f"cause_gone:{cause.rule}", criterion=criterion, passed=False,
                evidence=[_cited(ev.path, ev.line, ev.text)] if ev else [], missing=missing,
            )
        )
    return checks


def verify(
    paths: Sequence[str | os.PathLike[str]],
    *,
    rules_dirs: Iterable[str | os.PathLike[str]] = (),
    stdin: Any = None,
    against: Diagnosis | None = None,
    redacting: bool = True,
) -> VerifyResult:
    """Check logs of a rerun against the success criteria. Never prints and never exits; secrets are
    redacted from every string of the result (paths and warnings too) unless asked.

    `against` is the diagnosis of the earlier run: its first-ranked cause must not be found again,
    and the criteria it listed beyond the generic ones are returned in `also_confirm`.
    Raises InputError for a missing path, KnowledgeBaseError for invalid rule packs.
    """
    analysis = analyse([os.fspath(p) for p in paths], rules_dirs=rules_dirs, stdin=stdin, redact=redacting)
    facts = analysis.inference.facts
    boundary = next((f for f in facts if f.type == "boundary"), None)
    checks = [_first_step(facts, boundary), _progress(facts), _step_time(facts), _reward(facts, boundary), _no_failure(analysis.diagnosis)]
    also: list[str] = []
    if against is not None:
        checks += _cause_gone(against, analysis.diagnosis)
        also = [line for line in against.verification if line not in SUCCESS_CRITERIA]
    result = VerifyResult(
        passed=all(c.passed for c in checks),
        checks=checks,
        inputs=[s.path for s in analysis.scans],
        warnings=[f"{w.path}: {w.message}" for w in analysis.warnings],
        also_confirm=also,
    )
    return finish_model(result, redacting)


def format_text(result: VerifyResult) -> str:
    lines = []
    for check in result.checks:
        if check.passed and check.evidence:
            first = check.evidence[0]
            detail = f" [{first.detail}]" if first.detail else ""
            lines.append(f"PASS  {check.criterion}{detail} — {first.location()}: {first.text}")
        elif check.passed:
            lines.append(f"PASS  {check.criterion}")
        elif check.name == CHECK_NAMES[4] or check.name.startswith("cause_gone:"):
            lines.append(f"FAIL  {check.criterion} — {check.missing}")
        else:
            lines.append(f"FAIL  {check.criterion} — missing: {check.missing}")
    for item in result.also_confirm:
        lines.append(f"TODO  {item} (from the earlier diagnosis; confirm it in the logs)")
    verdict = "all success criteria hold" if result.passed else f"{sum(not c.passed for c in result.checks)} of {len(result.checks)} criteria failed"
    lines.append(f"{'ok' if result.passed else 'FAILED'}: {verdict}")
    return "\n".join(lines) + "\n"


