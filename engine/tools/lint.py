"""`rules lint`: every schema and cross-file problem of a knowledge base, in one run.

Loading already rejects what would make a diagnosis wrong (schema, ids, unknown references, cyclic
negation). Lint adds the checks that keep a contributed rule honest: orphans, examples, templates
rendered with strict undefined, regexes that backtrack, deprecated references.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ..base.errors import KnowledgeBaseError, Problem
from ..base.vocabulary import BASE_FACTS, Status, ValueType
from ..kb.checks import check, run_checks
from ..kb.compile import SANDBOX, CompiledPattern, produced_types, rule_patterns
from ..kb.knowledge import CompiledSignature, KnowledgeBase, LoadedRule
from ..kb.literals import group_sets
from ..kb.load import load_knowledge_base
from ..kb.models import Operators
from ..kb.regexes import BoundedPattern
from ..kb.sandbox import TemplateLimit, bounded, evaluate, render_bounded
from ..pipeline.render import environment, template_context
from .expectations import check_signature_examples

REGEX_BOUND_SECONDS = 0.1
REGEX_TRIES = 3

def lint(rules_dirs: Iterable[str] = (), include_builtin: bool = True) -> list[Problem]:
    try:
        kb = load_knowledge_base(list(rules_dirs), include_builtin=include_builtin)
    except KnowledgeBaseError as exc:
        return exc.problems
    return sorted(set(run_checks(kb, "lint")))


def used_signatures(kb: KnowledgeBase) -> dict[str, list[LoadedRule]]:
    used: dict[str, list[LoadedRule]] = {}
    for loaded in kb.rules:
        for _section, _index, pattern in loaded.model.when.patterns():
            for sig_id in pattern.signature_ids():
                used.setdefault(sig_id, []).append(loaded)
    return used


@check("lint")
def check_orphans(kb: KnowledgeBase) -> Iterable[Problem]:
    used = used_signatures(kb)
    for sig_id, sig in sorted(kb.signatures.items()):
        if sig_id not in used and sig.model.status is not Status.deprecated:
            line, col = sig.origin.at("id")
            yield Problem(sig.origin.display, line, col, "orphan-signature", f"no rule uses signature '{sig_id}'")


@check("lint")
def check_deprecated_references(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig_id, rules in sorted(used_signatures(kb).items()):
        sig = kb.signatures.get(sig_id)
        if sig is None or sig.model.status is not Status.deprecated:
            continue
        for loaded in rules:
            if loaded.model.status is Status.deprecated:
                continue
            line, col = loaded.origin.at("when")
            hint = f"; use '{sig.model.replaced_by}'" if sig.model.replaced_by else ""
            yield Problem(loaded.origin.display, line, col, "deprecated-ref", f"rule uses deprecated signature '{sig_id}'{hint}")
    deprecated_rules = {r.id: r for r in kb.rules if r.model.status is Status.deprecated}
    for loaded in kb.rules:
        evidence = loaded.model.then.evidence
        targets = [evidence.cause] if evidence and evidence.cause else []
        targets += [s.cause for s in loaded.model.then.suppress if s.cause]
        for target in targets:
            if target in deprecated_rules and loaded.model.status is not Status.deprecated:
                line, col = loaded.origin.at("then")
                yield Problem(loaded.origin.display, line, col, "deprecated-ref", f"rule refers to deprecated rule '{target}'")


@check("lint")
def check_examples(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig in kb.signatures.values():
        yield from check_signature_examples(sig, kb)


def _pathological_inputs(sig: CompiledSignature) -> list[str]:
    return _pathological_texts(list(sig.literals or ()))


def _pathological_texts(literals: list[str]) -> list[str]:
    seeds = literals + [""]
    inputs = []
    for seed in seeds:
        # Short runs expose exponential backtracking, long runs polynomial; the NUL makes the match fail late.
        for char in "a0 _-.:/x":
            inputs.append(seed + char * 32 + "\x00")
            inputs.append(seed + char * 3000 + "\x00")
        inputs.append(seed + ("a" * 40 + " ") * 120 + "\x00")
        inputs.append((seed + " 1") * 400 + "\x00")
    return inputs


def _search_seconds(pattern: BoundedPattern, text: str) -> float:
    """The processor time one search takes (not wall time, which other processes on a busy machine
    stretch); the wall-clock timeout only stops a search that would never end."""
    start = time.process_time()
    try:
        pattern.search(text, timeout=10 * REGEX_BOUND_SECONDS)
    except TimeoutError:
        pass
    return time.process_time() - start


def _slow(pattern: BoundedPattern, inputs: list[str]) -> bool:
    # A slow pattern is slow every time; a busy machine only sometimes. The fastest of a few tries
    # is the pattern's own cost (a try is repeated only when the first one was slow).
    return any(all(_search_seconds(pattern, text) >= REGEX_BOUND_SECONDS for _try in range(REGEX_TRIES)) for text in inputs)


@check("lint")
def check_regex_cost(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig in kb.signatures.values():
        if _slow(sig.regex, _pathological_inputs(sig)):
            line, col = sig.origin.at("pattern")
            yield Problem(
                sig.origin.display, line, col, "slow-regex", f"pattern took over {REGEX_BOUND_SECONDS}s on a pathological line; remove nested or overlapping quantifiers"
            )
    # `matches:` patterns run over fact values with the same timeout, so they are held to the same bound.
    for loaded in kb.rules:
        slots, negatives = rule_patterns(loaded.model, loaded.origin.display)
        for section, index, pattern in loaded.model.when.patterns():
            for field_name, constraint in pattern.where.items():
                if not isinstance(constraint, Operators) or not isinstance(constraint.matches, str) or constraint.matches.startswith("$"):
                    continue
                compiled = next((c.pattern for s in [*slots, tuple(negatives)] for p in s for c in p.checks if c.op == "matches" and c.value == constraint.matches), None)
                if compiled is not None and _slow(compiled, _pathological_texts([])):
                    line, col = loaded.origin.at("when", section, index, "where", field_name, "matches")
                    yield Problem(loaded.origin.display, line, col, "slow-regex", f"matches pattern took over {REGEX_BOUND_SECONDS}s on a pathological value; remove nested or overlapping quantifiers")


def _sample(kind: ValueType | None) -> Any:
    return {ValueType.int: 1, ValueType.float: 1.0, ValueType.size: 1024, ValueType.duration: 1.0, ValueType.version: "1.0.0"}.get(kind, "x") if kind else "x"


def _declared_fields(kb: KnowledgeBase) -> dict[str, set[str]]:
    fields = {name: set(columns) for name, columns in BASE_FACTS.items()}
    for loaded in kb.rules:
        for action in loaded.model.then.derive:
            fields.setdefault(action.fact, set()).update(action.fields)
    return fields


def synthetic_bindings(
    kb: KnowledgeBase, loaded: LoadedRule, loose: Any = "x", choice: dict[str, str] | None = None, way: int = 0
) -> dict[str, dict[str, Any]]:
    """The fields each alias of the rule is guaranteed to carry, with sample values.

    `loose` is the sample for fields whose type nothing declares (config values, derived facts);
    `choice` picks, per alias, which of the signatures listed in its pattern matched.
    """
    declared = _declared_fields(kb)
    slots, _negatives = rule_patterns(loaded.model)
    bindings: dict[str, dict[str, Any]] = {}
    primes = iter((2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53))
    for slot in slots:
        for pattern in slot:
            if pattern.alias.startswith("_"):
                continue
            sample = next(primes, 59) if loose == "primes" else loose
            values: dict[str, Any] = {name: sample for name in declared.get(pattern.type, set())}
            for literal in pattern.literal_checks:
                if literal.op == "eq":
                    values[literal.field] = literal.value
            if pattern.type == "hit":
                sig_id = (choice or {}).get(pattern.alias) or next(iter(_signature_choices(pattern)), None)
                sig = kb.signatures.get(str(sig_id)) if sig_id else None
                if sig is not None:
                    values["signature"] = sig.id
                    if sig.model.scope == "frame":
                        values.update({name: loose if loose != "primes" else "x" for name in BASE_FACTS["frame_hit"]})
                    # Optional groups may be absent at run time; templates must guard them, so only
                    # groups outside any optional part count as guaranteed.
                    ways = group_sets(sig.model.pattern)
                    groups = set(sig.regex.groupindex) if ways is None else ways[min(way, len(ways) - 1)]
                    for group in sorted(groups):
                        sample = _sample(sig.model.values.get(group))
                        values[group] = sample
                        values[f"last_{group}"] = sample
                values.update(count=1, line=1, rank=None, ranks=0, timestamp=None)
            bindings[pattern.alias] = values
    return bindings


def _signature_choices(pattern: CompiledPattern) -> list[str]:
    return pattern.source.signature_ids()


def _candidates(kb: KnowledgeBase, loaded: LoadedRule) -> Iterable[dict[str, dict[str, Any]]]:
    slots, _negatives = rule_patterns(loaded.model)
    options = [(p.alias, _signature_choices(p)) for slot in slots for p in slot if p.type == "hit" and not p.alias.startswith("_")]
    combos: list[dict[str, str]] = [{}]
    for alias, ids in options:
        combos = [{**c, alias: sig_id} for c in combos for sig_id in (ids or [""])][:32]
    for combo in combos:
        ways = max((len(group_sets(kb.signatures[s].model.pattern) or [0]) for s in combo.values() if s in kb.signatures), default=1)
        for way in range(ways):
            yield from (synthetic_bindings(kb, loaded, loose, combo, way) for loose in ("x", "primes", 1024))


@check("lint")
def check_templates(kb: KnowledgeBase) -> Iterable[Problem]:
    env = environment(kb)
    for loaded in kb.rules:
        model = loaded.model
        pieces: list[tuple[tuple[Any, ...], str | None, str | None]] = [(("fix",), model.fix, None), (("fix_template",), None, model.fix_template)]
        for index, step in enumerate(model.patch_plan):
            pieces.append((("patch_plan", index, "target"), step.target, None))
            pieces.append((("patch_plan", index, "change"), step.change, None))
        for index, line in enumerate(model.verify):
            pieces.append((("verify", index), line, None))
        pieces = [p for p in pieces if p[1] is not None or p[2] is not None]
        failures: dict[tuple[Any, ...], str] = {}
        by_signature: dict[str, list[dict[str, dict[str, Any]]]] = {}
        for bindings in _candidates(kb, loaded):
            key = repr(sorted((a, f.get("signature"), tuple(sorted(f))) for a, f in bindings.items()))
            by_signature.setdefault(key, []).append(bindings)
        for group in by_signature.values():
            # One consistent typing of the untyped fields must render every piece; prefer typings
            # under which the rule's tests can hold.
            viable = [b for b in group if _tests_hold(loaded, b)] or group
            for loc, text, name in pieces:
                errors = []
                for bindings in viable:
                    try:
                        template = bounded(lambda name=name, text=text: env.get_template(name) if name else env.from_string(text or ""))  # type: ignore[misc]
                        render_bounded(template, template_context(bindings, []))
                        break
                    except TemplateLimit as exc:
                        # A limit is not a matter of which fields the rule sees: no other try.
                        failures.setdefault(loc, f"{type(exc).__name__}: {exc}")
                        break
                    except Exception as exc:  # noqa: BLE001 - any render failure is the contributor's to fix
                        errors.append(f"{type(exc).__name__}: {exc}")
                else:
                    failures.setdefault(loc, errors[0])
        for where, error in sorted(failures.items(), key=lambda item: str(item[0])):
            row, col = loaded.origin.at(*where)
            yield Problem(loaded.origin.display, row, col, "template", f"does not render with the rule's fields: {error}")


def _tests_hold(loaded: LoadedRule, bindings: dict[str, dict[str, Any]]) -> bool:
    for text in loaded.model.when.test:
        try:
            if not evaluate(bounded(lambda text=text: SANDBOX.compile_expression(text)), bindings):  # type: ignore[misc]
                return False
        except Exception:  # noqa: BLE001
            return False
    return True


@check("lint")
def check_sandbox_escape(kb: KnowledgeBase) -> Iterable[Problem]:
    for folder in kb.template_dirs:
        for path in sorted(folder.rglob("*.j2")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for line_no, line in enumerate(text.splitlines(), start=1):
                index = line.find("__")
                if index >= 0 and "{" in line:
                    yield Problem(str(path), line_no, index + 1, "template-internals", "templates may not reach Python internals (dunder attributes)")


@check("lint")
def check_hit_fields(kb: KnowledgeBase) -> Iterable[Problem]:
    """A `where` on a hit that names a field none of its signatures can set would never match."""
    base = set(BASE_FACTS["hit"]) | set(BASE_FACTS["frame_hit"])
    for loaded in kb.rules:
        for section, index, pattern in loaded.model.when.patterns():
            ids = pattern.signature_ids()
            sigs = [kb.signatures[i] for i in ids if i in kb.signatures]
            if not sigs:
                continue
            groups = set().union(*(set(s.regex.groupindex) for s in sigs))
            known = base | groups | {f"last_{g}" for g in groups}
            for name in pattern.where:
                if name not in known:
                    line, col = loaded.origin.at("when", section, index, "where", name)
                    yield Problem(
                        loaded.origin.display, line, col, "unknown-field", f"no signature of this pattern sets field '{name}' ({', '.join(sorted(ids))})"
                    )


PLACEHOLDER = "TODO(rltriage)"


@check("lint")
def check_placeholders(kb: KnowledgeBase) -> Iterable[Problem]:
    origins = [s.origin for s in kb.signatures.values()] + [r.origin for r in kb.rules]
    for origin in origins:
        text = origin.path.read_text(encoding="utf-8", errors="replace")
        for line_no, line in enumerate(text.splitlines(), start=1):
            col = line.find(PLACEHOLDER)
            if col >= 0:
                yield Problem(origin.display, line_no, col + 1, "placeholder", "scaffold placeholder left in; fill it in")


@check("lint")
def check_growing_derivations(kb: KnowledgeBase) -> Iterable[Problem]:
    """A rule that computes a field (a template) of a fact type it also needs, directly or through
    other rules, can derive ever new values: a chain that never reaches a fixpoint, or doubles a
    text until memory runs out. Copying fields (`$alias.field`) cannot grow and is allowed."""
    needs: dict[str, set[str]] = {}  # fact type -> types the rules deriving it consume
    for loaded in kb.rules:
        consumed = {p.fact for _s, _i, p in loaded.model.when.patterns()}
        for fact_type in produced_types(loaded.model):
            needs.setdefault(fact_type, set()).update(consumed)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(needs.get(current, ()))
        return False

    for loaded in kb.rules:
        consumed = {p.fact for _s, _i, p in loaded.model.when.patterns()}
        for index, action in enumerate(loaded.model.then.derive):
            computed = sorted(name for name, value in action.fields.items() if isinstance(value, str) and "{{" in value)
            if computed and any(reaches(t, action.fact) for t in consumed):
                line, col = loaded.origin.at("then", "derive", index, "fields", computed[0])
                yield Problem(
                    loaded.origin.display, line, col, "growing-derive",
                    f"field '{computed[0]}' of '{action.fact}' is computed from facts that '{action.fact}' itself leads to: the chain can grow without end",
                )
