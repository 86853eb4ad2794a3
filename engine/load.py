"""Stage 1 — load: read and validate signatures, rules and templates into an immutable knowledge base."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, ValidationError

from .errors import KnowledgeBaseError, Problem
from .infer import BASE_FACTS
from .literals import is_case_insensitive, required_literals
from .models import Rule, Signature
from .yamlio import load_yaml, plain, validation_problems

PACK_FOLDERS = ("signatures", "rules", "templates", "fixtures")


@dataclass(frozen=True)
class Origin:
    """Where a knowledge-base item was written, for messages, `rules show` and lint."""

    path: Path
    display: str
    tree: Any = field(compare=False, repr=False)

    def at(self, *loc: Any) -> tuple[int, int]:
        from .yamlio import position

        return position(self.tree, tuple(loc))


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
class KnowledgeBase:
    signatures: dict[str, CompiledSignature]
    rules: tuple[LoadedRule, ...]
    template_dirs: tuple[Path, ...]
    fixture_dirs: tuple[Path, ...]
    packs: tuple[Path, ...]
    program: Any = field(repr=False, compare=False, default=None)

    def rule(self, rule_id: str) -> LoadedRule | None:
        for loaded in self.rules:
            if loaded.id == rule_id:
                return loaded
        return None


def builtin_pack() -> Path:
    """The knowledge base shipped with the package (or the source tree when run from a checkout)."""
    shipped = Path(str(resources.files("rltriage"))) / "_kb"
    if (shipped / "rules").is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent


def _display(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # pragma: no cover - different drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


def expected_id(folder: Path, path: Path) -> str:
    return ".".join(path.relative_to(folder).with_suffix("").parts)


def _yaml_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _parse(path: Path, model: type[BaseModel], problems: list[Problem]) -> tuple[Any, Origin] | None:
    display = _display(path)
    tree, found = load_yaml(path, display)
    if found:
        problems.extend(found)
        return None
    origin = Origin(path, display, tree)
    if not isinstance(tree, dict):
        problems.append(Problem(display, 1, 1, "schema", "the file must hold one mapping"))
        return None
    try:
        return model.model_validate(plain(tree)), origin
    except ValidationError as exc:
        problems.extend(validation_problems(exc, tree, display))
        return None


def _compile_signature(sig: Signature, origin: Origin, problems: list[Problem]) -> CompiledSignature | None:
    flags = regex.IGNORECASE if sig.ignore_case else 0
    try:
        compiled = regex.compile(sig.pattern, flags | regex.V0)
    except regex.error as exc:
        line, col = origin.at("pattern")
        problems.append(Problem(origin.display, line, col, "bad-regex", f"pattern does not compile: {exc}"))
        return None
    groups = set(compiled.groupindex)
    for name in sig.values:
        if name not in groups:
            line, col = origin.at("values", name)
            problems.append(Problem(origin.display, line, col, "unknown-group", f"values names '{name}', which the pattern has no group for"))
    reserved = set(BASE_FACTS["hit"]) | set(BASE_FACTS["frame_hit"])
    for name in sorted(groups & reserved):
        line, col = origin.at("pattern")
        problems.append(Problem(origin.display, line, col, "reserved-group", f"group name '{name}' is reserved for hit fields"))
    literals = tuple(sig.literals) if sig.literals else None
    if literals is None:
        derived = required_literals(sig.pattern)
        literals = tuple(derived) if derived else None
    ignore_case = sig.ignore_case or is_case_insensitive(sig.pattern)
    return CompiledSignature(sig, compiled, literals, ignore_case, origin)


_cache: dict[tuple[str, ...], KnowledgeBase] = {}
_cache_lock = threading.Lock()


def _pack_key(packs: Iterable[Path]) -> tuple[str, ...]:
    parts = []
    for pack in packs:
        newest = 0.0
        for folder in PACK_FOLDERS[:3]:
            base = pack / folder
            if base.is_dir():
                for p in base.rglob("*"):
                    try:
                        newest = max(newest, p.stat().st_mtime)
                    except OSError:
                        pass
        parts.append(f"{pack.resolve()}@{newest}")
    return tuple(parts)


def load_knowledge_base(rules_dirs: Iterable[str | os.PathLike[str]] = (), *, include_builtin: bool = True) -> KnowledgeBase:
    """Load the shipped knowledge base plus any extra packs; raises KnowledgeBaseError listing all problems."""
    packs: list[Path] = [builtin_pack()] if include_builtin else []
    for extra in rules_dirs:
        path = Path(extra)
        if not path.is_dir():
            raise KnowledgeBaseError([Problem(_display(path), 1, 1, "missing-pack", "rules directory does not exist")])
        packs.append(path)
    key = _pack_key(packs)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    kb = _load(packs)
    with _cache_lock:
        _cache[key] = kb
    return kb


def _load(packs: list[Path]) -> KnowledgeBase:
    from . import checks
    from .infer import compile_program

    problems: list[Problem] = []
    signatures: dict[str, CompiledSignature] = {}
    rules: dict[str, LoadedRule] = {}
    for pack in packs:
        folder = pack / "signatures"
        for path in _yaml_files(folder):
            parsed = _parse(path, Signature, problems)
            if parsed is None:
                continue
            sig, origin = parsed
            checks.check_id(sig.id, expected_id(folder, path), origin, problems)
            if sig.id in signatures:
                line, col = origin.at("id")
                first = signatures[sig.id].origin.display
                problems.append(Problem(origin.display, line, col, "duplicate-id", f"id '{sig.id}' is already defined in {first}"))
                continue
            compiled = _compile_signature(sig, origin, problems)
            if compiled is not None:
                signatures[sig.id] = compiled
        folder = pack / "rules"
        for path in _yaml_files(folder):
            parsed = _parse(path, Rule, problems)
            if parsed is None:
                continue
            rule, origin = parsed
            checks.check_id(rule.id, expected_id(folder, path), origin, problems)
            if rule.id in rules:
                line, col = origin.at("id")
                first = rules[rule.id].origin.display
                problems.append(Problem(origin.display, line, col, "duplicate-id", f"id '{rule.id}' is already defined in {first}"))
                continue
            rules[rule.id] = LoadedRule(rule, origin)
    template_dirs = tuple(p / "templates" for p in reversed(packs) if (p / "templates").is_dir())
    fixture_dirs = tuple(p / "fixtures" for p in packs if (p / "fixtures").is_dir())
    ordered_rules = tuple(sorted(rules.values(), key=lambda r: r.id))
    kb = KnowledgeBase(signatures, ordered_rules, template_dirs, fixture_dirs, tuple(packs))
    problems.extend(checks.cross_file(kb))
    program = None
    if not problems:
        program = compile_program(kb, problems)
    if problems:
        raise KnowledgeBaseError(problems)
    return KnowledgeBase(signatures, ordered_rules, template_dirs, fixture_dirs, tuple(packs), program)
