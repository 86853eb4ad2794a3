"""Cross-file checks that make a knowledge base unloadable. Each check is a small function."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import Problem
from .infer import BASE_FACTS, produced_types
from .models import Pattern, Rule

if TYPE_CHECKING:
    from .load import KnowledgeBase, LoadedRule, Origin


def check_id(found: str, expected: str, origin: Origin, problems: list[Problem]) -> None:
    if found != expected:
        line, col = origin.at("id")
        problems.append(Problem(origin.display, line, col, "id-path", f"id '{found}' does not match its file path (expected '{expected}')"))


def _patterns(rule: Rule) -> Iterator[tuple[str, int, Pattern]]:
    for section in ("all", "any", "none"):
        for index, pattern in enumerate(getattr(rule.when, section)):
            yield section, index, pattern


def _signature_ids(pattern: Pattern) -> list[str]:
    if pattern.fact != "hit":
        return []
    constraint: Any = pattern.where.get("signature")
    if isinstance(constraint, str):
        return [constraint]
    if isinstance(constraint, list):
        return [c for c in constraint if isinstance(c, str)]
    return []


def _template_exists(kb: KnowledgeBase, name: str) -> bool:
    return any((folder / name).is_file() for folder in kb.template_dirs)


def _rule_problems(kb: KnowledgeBase, loaded: LoadedRule, known_types: set[str], cause_ids: set[str]) -> Iterator[Problem]:
    rule, origin = loaded.model, loaded.origin

    def at(*loc: Any) -> tuple[int, int]:
        return origin.at(*loc)

    bound = {p.alias for s, _i, p in _patterns(rule) if p.alias and s != "none"}
    for section, index, pattern in _patterns(rule):
        if pattern.fact not in known_types:
            line, col = at("when", section, index)
            yield Problem(origin.display, line, col, "unknown-fact", f"no signature, pipeline stage or rule produces fact type '{pattern.fact}'")
        for sig_id in _signature_ids(pattern):
            if sig_id not in kb.signatures:
                line, col = at("when", section, index)
                yield Problem(origin.display, line, col, "unknown-signature", f"rule refers to unknown signature '{sig_id}'")
        for field_name, constraint in pattern.where.items():
            for ref in _refs(constraint):
                alias = ref.split(".", 1)[0]
                visible = bound | ({pattern.alias} if pattern.alias else set())
                if alias not in visible:
                    line, col = at("when", section, index, "where", field_name)
                    yield Problem(origin.display, line, col, "unknown-alias", f"'${ref}' names alias '{alias}', which no positive pattern binds")
    actions = [("evidence", rule.then.evidence.cite if rule.then.evidence else None)]
    actions += [(f"derive.{i}", d.cite) for i, d in enumerate(rule.then.derive)]
    for where, cite in actions:
        for alias in cite or []:
            if alias not in bound:
                parts = where.split(".")
                loc: tuple[Any, ...] = ("then", parts[0], int(parts[1]), "cite") if len(parts) == 2 else ("then", "evidence", "cite")
                line, col = at(*loc)
                yield Problem(origin.display, line, col, "unknown-alias", f"cite names alias '{alias}', which no positive pattern binds")
    if rule.then.evidence and rule.then.evidence.cause and rule.then.evidence.cause not in cause_ids:
        line, col = at("then", "evidence", "cause")
        yield Problem(origin.display, line, col, "unknown-cause", f"evidence goes to unknown cause '{rule.then.evidence.cause}'")
    for index, action in enumerate(rule.then.suppress):
        if action.cause and action.cause not in cause_ids:
            line, col = at("then", "suppress", index, "cause")
            yield Problem(origin.display, line, col, "unknown-cause", f"suppress names unknown cause '{action.cause}'")
    if rule.fix_template and not _template_exists(kb, rule.fix_template):
        line, col = at("fix_template")
        yield Problem(origin.display, line, col, "unknown-template", f"template '{rule.fix_template}' does not exist in any templates folder")


def _refs(constraint: Any) -> Iterator[str]:
    values: list[Any]
    if hasattr(constraint, "model_dump"):
        values = list(constraint.model_dump(exclude_none=True).values())
    elif isinstance(constraint, list):
        values = constraint
    else:
        values = [constraint]
    for value in values:
        if isinstance(value, str) and value.startswith("$") and "." in value:
            yield value[1:]


def cross_file(kb: KnowledgeBase) -> list[Problem]:
    known_types = set(BASE_FACTS)
    for loaded in kb.rules:
        known_types |= produced_types(loaded.model)
    cause_ids = {r.id for r in kb.rules if r.model.concludes}
    problems: list[Problem] = []
    for loaded in kb.rules:
        problems.extend(_rule_problems(kb, loaded, known_types, cause_ids))
    return problems
