"""The output contract: what `diagnose` returns and what `--format json` prints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .vocabulary import Bucket, Gap, InputKind, PatchKind, Stage, Symptom

SCHEMA_VERSION = 1


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Evidence(Out):
    path: str
    line: int
    text: str
    signature: str


class KnowledgeBasePack(Out):
    """One folder of the knowledge base a diagnosis used: the shipped copy, a checkout, or a pack."""

    path: str
    origin: Literal["installed", "checkout", "pack"]


class ToolInfo(Out):
    name: Literal["rltriage"] = "rltriage"
    version: str
    knowledge_base: list[KnowledgeBasePack] = Field(default_factory=list)


class InputSummary(Out):
    path: str
    kind: InputKind
    lines: int


# Shared by every InputSummary made below. A set, not a frozenset: model_copy(update=...) copies
# it and adds to the copy; the models are frozen, so nothing adds to this one.
_INPUT_FIELDS = set(InputSummary.model_fields)


def input_summary(path: str, kind: InputKind, lines: int) -> InputSummary:
    """`InputSummary.model_construct(...)` (no validation: the values come typed from the scans) in
    half its memory. model_construct gives each model a dict of its own, 184 bytes for these three
    fields; a model whose fields are set one by one, always in the same order, on an instance that
    has no dict yet shares one table of keys with every other (CPython's key-sharing dicts), and a
    folder of 100,000 files has 100,000 of them. The model is otherwise what model_construct makes:
    the same fields set, no extra or private attributes (InputSummary has neither)."""
    summary = InputSummary.__new__(InputSummary)
    object.__setattr__(summary, "path", path)
    object.__setattr__(summary, "kind", kind)
    object.__setattr__(summary, "lines", lines)
    object.__setattr__(summary, "__pydantic_fields_set__", _INPUT_FIELDS)
    object.__setattr__(summary, "__pydantic_extra__", None)
    object.__setattr__(summary, "__pydantic_private__", None)
    return summary


class Boundary(Out):
    last_completed: Stage | None = None
    first_missing: Stage | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    silent_seconds: float | None = None
    # Where the failure's own frames place it (e.g. "the reward computation"), when a traceback says.
    phase: str | None = None


class Failure(Out):
    """An uncaught failure found in the inputs: an exception, a C++ termination, a fatal signal or an
    exit code, with the process it came from and its innermost frame."""

    path: str
    line: int
    process: str | None = None
    type: str
    message: str
    frame: str | None = None
    signal: str | None = None


class PatchPlanStep(Out):
    kind: PatchKind
    target: str
    change: str


class Cause(Out):
    rule: str
    bucket: Bucket
    score: float = Field(ge=0.0, le=1.0)
    title: str
    evidence: list[Evidence] = Field(default_factory=list)
    fix: str
    patch_plan: list[PatchPlanStep] = Field(default_factory=list)
    blocking: bool = False


class Suppressed(Out):
    target: str
    reason: str
    rule: str


class Warning_(Out):
    path: str
    message: str


class UnexplainedLine(Out):
    """A failure-looking line no signature explains, grouped with its look-alikes."""

    template: str
    count: int
    evidence: Evidence


class CollectItem(Out):
    """A piece of evidence that would separate the top hypotheses (or fill a gap of a thin run),
    with the exact command or setting that collects it."""

    id: str
    title: str
    kind: PatchKind
    command: str
    when: str | None = None
    score: float = Field(ge=0.0)
    confirms: list[str] = Field(default_factory=list)  # causes the evidence would confirm
    rules_out: list[str] = Field(default_factory=list)  # causes it would rule out
    gaps: list[Gap] = Field(default_factory=list)
    reason: str


class Diagnosis(Out):
    schema_version: Literal[1] = 1
    tool: ToolInfo
    mode: Literal["diagnose", "preflight"] = "diagnose"
    inputs: list[InputSummary]
    symptom: Symptom
    primary_bucket: Bucket | None
    boundary: Boundary
    causes: list[Cause]
    failures: list[Failure] = Field(default_factory=list)
    verification: list[str]
    smoke_test: list[PatchPlanStep] = Field(default_factory=list)
    unexplained: list[UnexplainedLine] = Field(default_factory=list)
    suppressed: list[Suppressed] = Field(default_factory=list)
    warnings: list[Warning_] = Field(default_factory=list)
    # What to collect next: set when the top causes are close or the evidence is thin.
    collect: list[CollectItem] = Field(default_factory=list)
    collect_reasons: list[str] = Field(default_factory=list)


# --- `rltriage diff GOOD BAD` ----------------------------------------------------------------------


class Divergence(Out):
    """Where the broken run's boundary parts from the healthy run's: the first stage the healthy run
    passed and the broken one never did."""

    stage: Stage | None = None
    good_last: Stage | None = None
    bad_last: Stage | None = None
    evidence: list[Evidence] = Field(default_factory=list)


class Change(Out):
    """A value that differs between the healthy and the broken run."""

    kind: Literal["package", "system", "kernel", "env", "config"]
    name: str
    good: str | None = None
    bad: str | None = None
    good_at: str | None = None  # path:line in the healthy run
    bad_at: str | None = None
    # The knowledge base's contracts on a changed config key: "rule: broken" / "rule: holds".
    contracts: list[str] = Field(default_factory=list)
    # Causes of the broken run whose rule reads this value.
    causes: list[str] = Field(default_factory=list)


class RerankedCause(Out):
    rule: str
    bucket: Bucket
    title: str
    score: float = Field(ge=0.0, le=1.0)  # after re-ranking by what changed
    diagnosis_score: float = Field(ge=0.0, le=1.0)  # in the broken run's own diagnosis
    reads: list[str] = Field(default_factory=list)  # changed values the rule reads ("package vllm")


class RunDiff(Out):
    schema_version: Literal[1] = 1
    tool: ToolInfo
    good: list[InputSummary]
    bad: list[InputSummary]
    divergence: Divergence
    changes: list[Change] = Field(default_factory=list)
    # Failure-looking line templates (numbers, ids, paths masked) found only in the broken run.
    new_lines: list[UnexplainedLine] = Field(default_factory=list)
    causes: list[RerankedCause] = Field(default_factory=list)
    diagnosis: Diagnosis  # the broken run's own diagnosis
