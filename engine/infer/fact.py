"""Facts: what the pipeline asserts and the rules derive, with the keys that give them set semantics."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any, ClassVar, NamedTuple

from ..base.contract import Evidence
from ..base.values import number as number_of


class Cited(NamedTuple):
    """A line a fact rests on, as the facts and the engine carry it: a tuple, not yet the report's
    Evidence model (a pydantic model keeps its values in a dict of its own, 264 bytes against 72
    here, and a folder of 100,000 logs makes a citation for every hit). Made into Evidence where it
    enters the report (`evidence`)."""

    path: str
    line: int
    text: str
    signature: str

    def evidence(self) -> Evidence:
        return Evidence.model_construct(_EVIDENCE_FIELDS, path=self.path, line=self.line, text=self.text, signature=self.signature)


# One set of field names shared by every Evidence made (a pydantic model otherwise keeps its own). A
# set, not a frozenset: model_copy(update=...) copies it and adds to the copy; Evidence is frozen, so
# nothing adds to this one.
_EVIDENCE_FIELDS = set(Evidence.model_fields)


def as_evidence(cited: Iterable[Cited]) -> list[Evidence]:
    return [line.evidence() for line in cited]


@dataclass(frozen=True, eq=False, slots=True)
class Fact:
    id: int
    type: str
    fields: Mapping[str, Any]
    evidence: tuple[Cited, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        return fact_key(self.type, self.fields)

    def get(self, name: str) -> Any:
        return self.fields.get(name)


class TableFields(Mapping[str, Any]):
    """Read-only fields whose names, in order, are the keys of a table shared by every fact of the
    same shape; what each name leads to is up to the subclass. What the engine keeps as asserted."""

    __slots__ = ("_table",)

    _table: Mapping[str, Any]

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class PackedFields(TableFields):
    """Read-only fields kept as a tuple of values beside a table of names shared by every fact of
    the same shape. A dict of fifteen fields takes 464 bytes, this 208 (CPython 3.11): a folder of
    100,000 logs asserts an input fact for each and a hit fact for most."""

    __slots__ = ("_values",)

    _table: dict[str, int]
    # One table per shape; shapes come from the signatures' groups and the pipeline, so they are few.
    _tables: ClassVar[dict[tuple[str, ...], dict[str, int]]] = {}

    def __init__(self, fields: Mapping[str, Any]) -> None:
        names = tuple(fields)
        table = PackedFields._tables.get(names)
        if table is None:
            table = PackedFields._tables.setdefault(names, {name: index for index, name in enumerate(names)})
        self._table = table
        self._values = tuple(fields.values())

    def __getitem__(self, name: str) -> Any:
        return self._values[self._table[name]]

    def get(self, name: str, default: Any = None) -> Any:
        index = self._table.get(name)
        return default if index is None else self._values[index]


# How a FieldView reads one field from the two objects it looks at.
Read = Callable[[Any, Any], Any]


class FieldView(TableFields):
    """Read-only fields read on demand from the objects they come from, which the pipeline keeps
    anyway (a file's scan, a signature's tally), instead of copied out of them: a folder of 100,000
    logs asserts an input fact for each file and a hit fact for most, and 56 bytes here replace a
    tuple of values (160 bytes for a hit's fifteen). The names, in order, and how to read each come
    from a table shared by every fact of the same shape. The objects must not change once viewed."""

    __slots__ = ("_first", "_second")

    _table: Mapping[str, Read]

    def __init__(self, table: Mapping[str, Read], first: Any, second: Any = None) -> None:
        self._table = table
        self._first = first
        self._second = second

    def __getitem__(self, name: str) -> Any:
        return self._table[name](self._first, self._second)

    def get(self, name: str, default: Any = None) -> Any:
        read = self._table.get(name)
        return default if read is None else read(self._first, self._second)


Fields = dict[str, Any] | TableFields


@dataclass(slots=True)
class BaseFact:
    """A fact as the pipeline asserts it, before the engine numbers it."""

    type: str
    fields: Fields
    evidence: tuple[Cited, ...] = ()


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
