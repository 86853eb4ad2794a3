"""The knowledge base as loaded: compiled signatures, rules, where each was written, and the
caches of what is built from it (the scanner, the template environment)."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .models import CatalogItem, Rule, Signature
from .yamlio import load_yaml, position

T = TypeVar("T")


@dataclass(frozen=True)
class Origin:
    """Where a knowledge-base item was written, for messages, `rules show` and lint."""

    path: Path
    display: str
    tree: Any = field(default=None, compare=False, repr=False)

    def at(self, *loc: Any) -> tuple[int, int]:
        # A knowledge base loaded from the cache has no trees; positions are only needed for
        # messages, so the file is parsed again then.
        tree = self.tree if self.tree is not None else _tree_of(self.path, self.display)
        return position(tree, tuple(loc))


@functools.lru_cache(maxsize=256)
def _tree_of(path: Path, display: str) -> Any:
    tree, _problems = load_yaml(path, display)
    return tree


@dataclass(frozen=True)
class CompiledSignature:
    model: Signature
    regex: Any
    literals: tuple[str, ...] | None
    ignore_case: bool
    origin: Origin

    @property
    def id(self) -> str:
        return self.model.id


@dataclass(frozen=True)
class LoadedRule:
    model: Rule
    origin: Origin

    @property
    def id(self) -> str:
        return self.model.id


@dataclass(frozen=True)
class LoadedItem:
    """A catalog item of evidence to collect (`collect/<id>.yaml`)."""

    model: CatalogItem
    origin: Origin

    @property
    def id(self) -> str:
        return self.model.id


class Cache:
    """What is built from one knowledge base, kept with it: bounded, and gone with the knowledge base."""

    def __init__(self, limit: int = 16) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, key: Any, build: Callable[[], T]) -> T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]  # type: ignore[no-any-return]
        value = build()
        with self._lock:
            value = self._items.setdefault(key, value)
            self._items.move_to_end(key)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
        return value


@dataclass(frozen=True)
class KnowledgeBase:
    signatures: dict[str, CompiledSignature]
    rules: tuple[LoadedRule, ...]
    template_dirs: tuple[Path, ...]
    fixture_dirs: tuple[Path, ...]
    packs: tuple[Path, ...]
    program: Any = field(repr=False, compare=False, default=None)
    cache: Cache = field(repr=False, compare=False, default_factory=Cache)
    # The catalog of evidence to collect, by id (`collect/<id>.yaml`).
    catalog: dict[str, LoadedItem] = field(repr=False, compare=False, default_factory=dict)

    def rule(self, rule_id: str) -> LoadedRule | None:
        for loaded in self.rules:
            if loaded.id == rule_id:
                return loaded
        return None
