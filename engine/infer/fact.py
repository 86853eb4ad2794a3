"""Facts: what the pipeline asserts and the rules derive, with the keys that give them set semantics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any

from ..base.contract import Evidence
from ..base.values import number as number_of


@dataclass(frozen=True, eq=False, slots=True)
class Fact:
    id: int
    type: str
    fields: Mapping[str, Any]
    evidence: tuple[Evidence, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        return fact_key(self.type, self.fields)

    def get(self, name: str) -> Any:
        return self.fields.get(name)


@dataclass(slots=True)
class BaseFact:
    """A fact as the pipeline asserts it, before the engine numbers it."""

    type: str
    fields: dict[str, Any]
    evidence: tuple[Evidence, ...] = ()


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def equality_key(value: Any) -> Any:
    """A hash key that equal values (in the rule language's loose sense: 1 == "1" == 1.0,
    True == "true") share. Values with the same key may still differ; candidates found through
    the key are re-checked with the operators, so the key only has to over-approximate."""
    if isinstance(value, bool):
        return ("n", 1.0 if value else 0.0)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return ("n", 1.0 if value.lower() == "true" else 0.0)
    if isinstance(value, (int, float, str)):
        try:
            number = number_of(value)
        except OverflowError:
            number = None
        if number is not None:
            return ("n", number + 0.0)  # -0.0 and 0.0 share a key
    return ("o", _hashable(value))


def fact_key(type_: str, fields: Mapping[str, Any]) -> tuple[Any, ...]:
    """The fact's identity: its type, then each field name and value in name order, in one flat
    tuple (the store keeps one per fact, 100,000 of them for a folder of 100,000 files)."""
    return (type_, *chain.from_iterable((k, _hashable(v)) for k, v in sorted(fields.items())))
