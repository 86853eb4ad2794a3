"""Typed models of the knowledge-base files: signatures, rules and fixture expectations.

Every model forbids unknown keys so that a typo in a contributed file is an error, not a silently
ignored field.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..base.vocabulary import Bucket, Gap, InputKind, PatchKind, Role, Stage, Status, Symptom, ValueType

ID_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
ALIAS_PATTERN = r"^[a-z][a-z0-9_]*$"

Scalar = Union[str, int, float, bool, None]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Operators(Strict):
    """Comparisons for one fact field. A string value starting with `$` names `alias.field`."""

    eq: Scalar = None
    ne: Scalar = None
    gt: Union[int, float, str, None] = None
    ge: Union[int, float, str, None] = None
    lt: Union[int, float, str, None] = None
    le: Union[int, float, str, None] = None
    one_of: list[Scalar] | None = Field(default=None, alias="in")
    not_in: list[Scalar] | None = None
    matches: str | None = None
    contains: str | None = None
    version_lt: str | None = None
    version_ge: str | None = None
    exists: bool | None = None
    multiple_of: Union[int, str, None] = None
    not_multiple_of: Union[int, str, None] = None


Constraint = Union[Operators, list[Scalar], Scalar]


class Pattern(Strict):
    """One fact the rule needs. Shorthands: `hit: ID`, `stage: NAME`, `config: KEY`, `package: NAME`,
    `env: NAME`, `system: NAME`."""

    fact: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    alias: str | None = Field(default=None, alias="as", pattern=ALIAS_PATTERN)
    where: dict[str, Constraint] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _expand_shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        shorthands = {"hit": "signature", "stage": "name", "config": "key", "package": "name", "env": "name", "system": "name"}
        present = [key for key in shorthands if key in data]
        if not present:
            return data
        if len(present) > 1 or "fact" in data:
            raise ValueError(f"give one of fact/{'/'.join(shorthands)}, not several")
        key = present[0]
        expanded = {k: v for k, v in data.items() if k != key}
        expanded["fact"] = key
        where = dict(expanded.get("where") or {})
        value = data[key]
        if key == "config" and isinstance(value, str):
            # `config: rollout.max_tokens` also finds `actor.rollout.max_tokens`: trainers nest the same keys differently.
            value = {"matches": r"(^|\.)" + re.escape(value) + "$"}
        where[shorthands[key]] = value
        expanded["where"] = where
        return expanded

    def signature_ids(self) -> list[str]:
        """The signatures a `hit` pattern names (one, or a list to choose from)."""
        if self.fact != "hit":
            return []
        constraint: Any = self.where.get("signature")
        if isinstance(constraint, str):
            return [constraint]
        if isinstance(constraint, list):
            return [c for c in constraint if isinstance(c, str)]
        return []


class Condition(Strict):
    all: list[Pattern] = Field(default_factory=list)
    any: list[Pattern] = Field(default_factory=list)
    none: list[Pattern] = Field(default_factory=list)
    test: list[str] = Field(default_factory=list)

    def patterns(self) -> Iterator[tuple[str, int, Pattern]]:
        """Every pattern with its section (`all`, `any`, `none`) and index: the one walk over a rule's patterns."""
        for section in ("all", "any", "none"):
            for index, pattern in enumerate(getattr(self, section)):
                yield section, index, pattern

    @model_validator(mode="after")
    def _needs_a_positive_pattern(self) -> Condition:
        if not self.all and not self.any and not self.none:
            raise ValueError("a rule needs at least one pattern under all, any or none")
        return self


class EvidenceAction(Strict):
    weight: float = Field(ge=-1.0, le=1.0)
    cause: str | None = Field(default=None, pattern=ID_PATTERN)
    cite: list[str] | None = None


class DeriveAction(Strict):
    fact: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    fields: dict[str, Any] = Field(default_factory=dict)
    cite: list[str] | None = None


class SuppressAction(Strict):
    bucket: Bucket | None = None
    cause: str | None = Field(default=None, pattern=ID_PATTERN)
    reason: str

    @model_validator(mode="after")
    def _one_target(self) -> SuppressAction:
        if (self.bucket is None) == (self.cause is None):
            raise ValueError("suppress needs exactly one of bucket or cause")
        return self


class Then(Strict):
    evidence: EvidenceAction | None = None
    derive: list[DeriveAction] = Field(default_factory=list)
    suppress: list[SuppressAction] = Field(default_factory=list)

    @model_validator(mode="after")
    def _does_something(self) -> Then:
        if self.evidence is None and not self.derive and not self.suppress:
            raise ValueError("then needs evidence, derive or suppress")
        return self


class PatchStep(Strict):
    kind: PatchKind
    target: str
    change: str


class MatchExample(Strict):
    line: str
    values: dict[str, Any] = Field(default_factory=dict)
    kind: InputKind | None = None


class SignatureExamples(Strict):
    match: list[MatchExample] = Field(min_length=1)
    no_match: list[str] = Field(min_length=1)

    @field_validator("match", mode="before")
    @classmethod
    def _plain_lines(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"line": item} if isinstance(item, str) else item for item in value]
        return value


class Signature(Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=3)
    status: Status = Status.stable
    replaced_by: str | None = Field(default=None, pattern=ID_PATTERN)
    source: str = Field(min_length=3)
    references: list[str] = Field(default_factory=list)
    description: str | None = None
    kinds: list[InputKind] = Field(default_factory=list)
    # `frame` signatures match frames of parsed stack dumps (`func (file:line)`), not log lines.
    scope: Literal["line", "frame"] = "line"
    pattern: str = Field(min_length=3)
    ignore_case: bool = False
    literals: list[str] | None = None
    values: dict[str, ValueType] = Field(default_factory=dict)
    distinct: list[str] = Field(default_factory=list)
    examples: SignatureExamples


CATALOG_ID_PATTERN = r"^[a-z][a-z0-9_]*$"


class CollectEntry(Strict):
    """A piece of evidence that would confirm or rule out the rule's cause, and the catalog item
    (`collect/<item>.yaml`) that collects it. `confirms` and `rules_out` are patterns in the rule
    language: the facts the collected evidence would give if the cause is (or is not) the one."""

    item: str = Field(pattern=CATALOG_ID_PATTERN)
    confirms: list[Pattern] = Field(default_factory=list)
    rules_out: list[Pattern] = Field(default_factory=list)
    note: str | None = None

    @model_validator(mode="after")
    def _says_something(self) -> CollectEntry:
        if not self.confirms and not self.rules_out:
            raise ValueError("a collect entry needs confirms or rules_out")
        return self


class CatalogItem(Strict):
    """One way of collecting evidence, defined once (`collect/<id>.yaml`) and named by rules."""

    id: str = Field(pattern=CATALOG_ID_PATTERN)
    title: str = Field(min_length=3)
    kind: PatchKind
    # Jinja (sandboxed) with what the run's logs name: pids, ips, ranks, pods, nodes, workers, configs.
    command: str = Field(min_length=3)
    when: str | None = None  # when to run it (e.g. "during the stall, while the processes are alive")
    gap: Gap | None = None  # the gap in the evidence this item fills, for thin-evidence runs
    # The item is already in the inputs when one of these matches (a stack dump, a package fact…).
    collected_when: list[Pattern] = Field(default_factory=list)
    cost: int = Field(default=1, ge=1, le=3)  # 1 a command, 2 a rerun with a setting, 3 a rerun with instrumentation


class Rule(Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=3)
    # What the rule is for: stage, boundary, evidence, support, contract, guard, derive, generic.
    role: Role
    status: Status = Status.stable
    replaced_by: str | None = Field(default=None, pattern=ID_PATTERN)
    source: str = Field(min_length=3)
    references: list[str] = Field(default_factory=list)
    bucket: Bucket | None = None
    symptom: Symptom | None = None
    priority: int = 0
    blocking: bool = False
    issue: str | None = None
    reason: str | None = None
    fix: str | None = None
    fix_template: str | None = None
    patch_plan: list[PatchStep] = Field(default_factory=list)
    verify: list[str] = Field(default_factory=list)
    # What would confirm or rule out this cause, and how to collect it ("What to collect next").
    collect: list[CollectEntry] = Field(default_factory=list)
    when: Condition
    then: Then

    @model_validator(mode="after")
    def _evidence_needs_bucket(self) -> Rule:
        if self.then.evidence is not None and self.then.evidence.cause is None:
            if self.bucket is None:
                raise ValueError("a rule that adds evidence to its own cause needs a bucket")
            if self.fix is None and self.fix_template is None:
                raise ValueError("a rule that adds evidence to its own cause needs fix or fix_template")
        if self.fix is not None and self.fix_template is not None:
            raise ValueError("give fix or fix_template, not both")
        return self

    @property
    def concludes(self) -> bool:
        """Whether the rule is a cause of its own (rather than support, a derivation or a guard)."""
        return self.then.evidence is not None and self.then.evidence.cause is None


class FixtureExpectation(Strict):
    """`expect.yaml` of a fixture run (`fixtures/<namespace>/<case>/`, the namespace being that of the
    rule the fixture is mainly about): what must rank first, be cited, fire and not fire."""

    description: str
    symptom: Symptom | None = None
    primary_bucket: Bucket | None | Literal["none"] = None
    first_cause: str | None = None
    top3: list[str] = Field(default_factory=list)
    boundary_last: Stage | None | Literal["none"] = None
    boundary_missing: Stage | None | Literal["none"] = None
    cites: list[str] = Field(default_factory=list)
    fires: list[str] = Field(default_factory=list)
    not_fires: list[str] = Field(default_factory=list)
    report_contains: list[str] = Field(default_factory=list)
    mode: Literal["diagnose", "preflight"] = "diagnose"
    # Catalog ids that "What to collect next" must list (collect_first: the one it must list first).
    collect: list[str] = Field(default_factory=list)
    collect_first: str | None = None
