"""What an inference run returns, and the interface every engine implements."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..kb.compile import Program
from .fact import BaseFact, Cited, Fact

DEFAULT_BUDGET = 50_000
# Firings kept per rule that derives no fact: its later tuples only repeat its conclusion (a weight
# and citations; a cause cites at most a handful of lines), and a rule joining two sets of hits of a
# large run (every rank's timeout with every rank's `Init COMPLETE`) would otherwise fire once per
# pair. Such repeats extend no chain, so they do not count against the firing budget.
MAX_CONCLUDING_FIRINGS = 64
DERIVED_BUDGET = 1 << 20  # characters of computed (template) text all derived facts of one run may hold


@dataclass(frozen=True)
class Firing:
    rule: str
    stratum: int
    facts: tuple[int, ...]
    bindings: Mapping[str, Mapping[str, Any]]
    derived: tuple[int, ...]
    weight: float | None
    cause: str | None
    evidence: tuple[Cited, ...]


@dataclass(frozen=True)
class SuppressionRecord:
    rule: str
    bucket: str | None
    cause: str | None
    reason: str
    evidence: tuple[Cited, ...]


@dataclass
class Inference:
    facts: list[Fact]
    firings: list[Firing]
    suppressions: list[SuppressionRecord]
    # How many of `facts`, from the first, were asserted (the rest were derived by rules).
    asserted: int = 0

    # Facts by type, built on the first lookup (and again if facts were added since): the report asks
    # for one type many times, and a folder of 100,000 files has as many input facts.
    _by_type: dict[str, list[Fact]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: int = field(default=-1, init=False, repr=False, compare=False)

    def facts_of(self, type_: str) -> list[Fact]:
        if self._indexed != len(self.facts):
            self._by_type = {}
            for fact in self.facts:
                self._by_type.setdefault(fact.type, []).append(fact)
            self._indexed = len(self.facts)
        return list(self._by_type.get(type_, ()))

    def asserted_facts(self) -> list[Fact]:
        """The facts the engine was given, numbered and with duplicates merged, in the order given."""
        return self.facts[: self.asserted]

    def fired(self, rule_id: str) -> bool:
        return any(f.rule == rule_id for f in self.firings)


class Engine(Protocol):
    name: str

    def run(self, program: Program, facts: Iterable[BaseFact], *, budget: int = DEFAULT_BUDGET) -> Inference: ...
