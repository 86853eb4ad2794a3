"""The one registry of knowledge-base checks. Each check is a small function of the knowledge base;
`load` checks make it unloadable (wrong ids, unknown references), `lint` checks keep a contributed
rule honest (`rltriage rules lint`). Lint registers its own checks here as well."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import PurePosixPath
from typing import Any, Literal

from ..base.errors import Problem
from ..base.vocabulary import BASE_FACTS, CAUSE_ROLES, Role
from .compile import produced_types
from .knowledge import KnowledgeBase, LoadedRule, Origin

Level = Literal["load", "lint"]
Check = Callable[[KnowledgeBase], Iterable[Problem]]
CHECKS: dict[Level, list[Check]] = {"load": [], "lint": []}


def check(level: Level) -> Callable[[Check], Check]:
    """Register a check of a level."""

    def register(function: Check) -> Check:
        CHECKS[level].append(function)
        return function

    return register


def run_checks(kb: KnowledgeBase, level: Level) -> list[Problem]:
    problems: list[Problem] = []
    for function in CHECKS[level]:
        problems.extend(function(kb))
    return problems


def check_id(found: str, expected: str, origin: Origin, problems: list[Problem]) -> None:
    if found != expected:
        line, col = origin.at("id")
        problems.append(Problem(origin.display, line, col, "id-path", f"id '{found}' does not match its file path (expected '{expected}')"))


def _template_exists(kb: KnowledgeBase, name: str) -> bool:
    return any((folder / name).is_file() for folder in kb.template_dirs)


def _rule_problems(kb: KnowledgeBase, loaded: LoadedRule, known_types: set[str], cause_ids: set[str]) -> Iterator[Problem]:
    rule, origin = loaded.model, loaded.origin

    def at(*loc: Any) -> tuple[int, int]:
        return origin.at(*loc)

    bound = {p.alias for s, _i, p in rule.when.patterns() if p.alias and s != "none"}
    for section, index, pattern in rule.when.patterns():
        if pattern.fact not in known_types:
            line, col = at("when", section, index)
            yield Problem(origin.display, line, col, "unknown-fact", f"no signature, pipeline stage or rule produces fact type '{pattern.fact}'")
        for sig_id in pattern.signature_ids():
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
    if rule.fix_template and (PurePosixPath(rule.fix_template).is_absolute() or ".." in PurePosixPath(rule.fix_template).parts):
        line, col = at("fix_template")
        yield Problem(origin.display, line, col, "unknown-template", f"template '{rule.fix_template}' must be a path inside a templates folder")
    elif rule.fix_template and not _template_exists(kb, rule.fix_template):
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


def _pattern_problems(
    kb: KnowledgeBase, origin: Origin, loc: tuple[Any, ...], pattern: Any, known_types: set[str], what: str
) -> Iterator[Problem]:
    if pattern.fact not in known_types:
        line, col = origin.at(*loc)
        yield Problem(origin.display, line, col, "unknown-fact", f"{what} is a pattern on fact type '{pattern.fact}', which no signature, pipeline stage or rule produces")
    for sig_id in pattern.signature_ids():
        if sig_id not in kb.signatures:
            line, col = origin.at(*loc)
            yield Problem(origin.display, line, col, "unknown-signature", f"{what} refers to unknown signature '{sig_id}'")
    for field_name, constraint in pattern.where.items():
        for ref in _refs(constraint):
            line, col = origin.at(*loc, "where", field_name)
            yield Problem(origin.display, line, col, "unknown-alias", f"'${ref}': {what} patterns stand alone and cannot refer to other facts")


def _collect_problems(kb: KnowledgeBase, known_types: set[str]) -> Iterator[Problem]:
    """Rules' `collect` entries name catalog items that exist, with patterns on fact types that exist;
    catalog items' `collected_when` patterns too."""
    for loaded in kb.rules:
        origin = loaded.origin
        for index, entry in enumerate(loaded.model.collect):
            if entry.item not in kb.catalog:
                line, col = origin.at("collect", index, "item")
                known = ", ".join(sorted(kb.catalog)) or "none"
                yield Problem(origin.display, line, col, "unknown-collect", f"collect names unknown catalog item '{entry.item}' (known: {known})")
            for section in ("confirms", "rules_out"):
                for p_index, pattern in enumerate(getattr(entry, section)):
                    yield from _pattern_problems(kb, origin, ("collect", index, section, p_index), pattern, known_types, f"collect.{section}")
    for item in kb.catalog.values():
        for p_index, pattern in enumerate(item.model.collected_when):
            yield from _pattern_problems(kb, item.origin, ("collected_when", p_index), pattern, known_types, "collected_when")


@check("load")
def check_references(kb: KnowledgeBase) -> list[Problem]:
    """Fact types, signatures, aliases, causes and templates a rule names must exist."""
    known_types = set(BASE_FACTS)
    for loaded in kb.rules:
        known_types |= produced_types(loaded.model)
    cause_ids = {r.id for r in kb.rules if r.model.concludes}
    problems: list[Problem] = []
    for loaded in kb.rules:
        problems.extend(_rule_problems(kb, loaded, known_types, cause_ids))
    problems.extend(_collect_problems(kb, known_types))
    return problems


# What each role must do, beyond the rule's own schema.
_ROLE_NEEDS: dict[Role, tuple[Callable[[Any], bool], str]] = {
    Role.stage: (lambda m: bool({d.fact for d in m.then.derive} & {"stage_seen", "stage"}), "a stage rule must derive stage_seen or stage facts"),
    Role.boundary: (lambda m: bool({d.fact for d in m.then.derive} & {"boundary", "symptom"}), "a boundary rule must derive boundary or symptom facts"),
    Role.support: (lambda m: m.then.evidence is not None and m.then.evidence.cause is not None, "a support rule must add evidence to another rule's cause"),
    Role.guard: (lambda m: bool(m.then.suppress), "a guard must suppress a bucket or a cause"),
    Role.derive: (lambda m: bool(m.then.derive), "a derive rule must derive facts"),
}


@check("lint")
def check_roles(kb: KnowledgeBase) -> Iterator[Problem]:
    """`role` says what a rule is for: only contracts may block; cause roles conclude; the others
    do what their role names, and nothing concludes a cause outside a cause role."""
    for loaded in kb.rules:
        model, origin = loaded.model, loaded.origin
        line, col = origin.at("role")
        if model.blocking and model.role is not Role.contract:
            at = origin.at("blocking")
            yield Problem(origin.display, at[0], at[1], "role-blocking", f"blocking: true needs role contract, not {model.role.value}")
        if model.role in CAUSE_ROLES and not model.concludes:
            yield Problem(origin.display, line, col, "role", f"a {model.role.value} rule must conclude a cause of its own (then.evidence without cause)")
        elif model.role not in CAUSE_ROLES and model.concludes:
            yield Problem(origin.display, line, col, "role", f"the rule concludes a cause; its role must be evidence, contract, generic or fallback, not {model.role.value}")
        need = _ROLE_NEEDS.get(model.role)
        if need is not None and not need[0](model):
            yield Problem(origin.display, line, col, "role", need[1])
