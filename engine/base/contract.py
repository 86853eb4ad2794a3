"""The output contract: what `diagnose` returns and what `--format json` prints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .vocabulary import Bucket, InputKind, PatchKind, Stage, Symptom

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
