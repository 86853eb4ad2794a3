"""`rules lint`: every schema and cross-file problem of a knowledge base, in one run.

Loading already rejects what would make a diagnosis wrong (schema, ids, unknown references, cyclic
negation). Lint adds the checks that keep a contributed rule honest: orphans, examples, templates
rendered with strict undefined, regexes that backtrack, deprecated references.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable


from .errors import KnowledgeBaseError, Problem
from .expectations import check_signature_examples
from .infer import BASE_FACTS, rule_patterns
from .load import CompiledSignature, KnowledgeBase, LoadedRule, load_knowledge_base
from .render import environment, template_context
from .vocabulary import Status, ValueType

REGEX_BOUND_SECONDS = 0.1

Check = Callable[[KnowledgeBase], Iterable[Problem]]


def lint(rules_dirs: Iterable[str] = (), include_builtin: bool = True) -> list[Problem]:
    try:
        kb = load_knowledge_base(list(rules_dirs), include_builtin=include_builtin)
    except KnowledgeBaseError as exc:
        return exc.problems
    problems: list[Problem] = []
    for check in CHECKS:
        problems.extend(check(kb))
    return sorted(set(problems))


def _used_signatures(kb: KnowledgeBase) -> dict[str, list[LoadedRule]]:
    used: dict[str, list[LoadedRule]] = {}
    for loaded in kb.rules:
        slots, negatives = rule_patterns(loaded.model)
        for pattern in [p for slot in slots for p in slot] + negatives:
            if pattern.type != "hit":
                continue
            for check in pattern.literal_checks:
                if check.field == "signature":
                    ids = check.value if isinstance(check.value, list) else [check.value]
                    for sig_id in ids:
                        used.setdefault(str(sig_id), []).append(loaded)
    return used


def check_orphans(kb: KnowledgeBase) -> Iterable[Problem]:
    used = _used_signatures(kb)
    for sig_id, sig in sorted(kb.signatures.items()):
        if sig_id not in used and sig.model.status is not Status.deprecated:
            line, col = sig.origin.at("id")
            yield Problem(sig.origin.display, line, col, "orphan-signature", f"no rule uses signature '{sig_id}'")


def check_deprecated_references(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig_id, rules in sorted(_used_signatures(kb).items()):
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


def check_examples(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig in kb.signatures.values():
        yield from check_signature_examples(sig, kb)


def _pathological_inputs(sig: CompiledSignature) -> list[str]:
    seeds = list(sig.literals or ()) + [""]
    inputs = []
    for seed in seeds:
        # Short runs expose exponential backtracking, long runs polynomial; the NUL makes the match fail late.
        for char in "a0 _-.:/x":
            inputs.append(seed + char * 32 + "\x00")
            inputs.append(seed + char * 3000 + "\x00")
        inputs.append(seed + ("a" * 40 + " ") * 120 + "\x00")
        inputs.append((seed + " 1") * 400 + "\x00")
    return inputs


def check_regex_cost(kb: KnowledgeBase) -> Iterable[Problem]:
    for sig in kb.signatures.values():
        for text in _pathological_inputs(sig):
            start = time.perf_counter()
            try:
                sig.regex.search(text, timeout=REGEX_BOUND_SECONDS)
            except TimeoutError:
                pass
            elapsed = time.perf_counter() - start
            if elapsed >= REGEX_BOUND_SECONDS:
                line, col = sig.origin.at("pattern")
                yield Problem(
                    sig.origin.display, line, col, "slow-regex", f"pattern took over {REGEX_BOUND_SECONDS}s on a pathological line; remove nested or overlapping quantifiers"
                )
                break


def _sample(kind: ValueType | None) -> Any:
    return {ValueType.int: 1, ValueType.float: 1.0, ValueType.size: 1024, ValueType.duration: 1.0, ValueType.version: "1.0.0"}.get(kind, "x") if kind else "x"


def _declared_fields(kb: KnowledgeBase) -> dict[str, set[str]]:
    fields = {name: set(columns) for name, columns in BASE_FACTS.items()}
    for loaded in kb.rules:
        for action in loaded.model.then.derive:
            fields.setdefault(action.fact, set()).update(action.fields)
    return fields


def synthetic_bindings(kb: KnowledgeBase, loaded: LoadedRule) -> dict[str, dict[str, Any]]:
    """The fields each alias of the rule is guaranteed to carry, with sample values."""
    declared = _declared_fields(kb)
    slots, _negatives = rule_patterns(loaded.model)
    bindings: dict[str, dict[str, Any]] = {}
    for slot in slots:
        for pattern in slot:
            if pattern.alias.startswith("_"):
                continue
            values: dict[str, Any] = {name: "x" for name in declared.get(pattern.type, set())}
            if pattern.type == "hit":
                for check in pattern.literal_checks:
                    if check.field != "signature":
                        continue
                    ids = check.value if isinstance(check.value, list) else [check.value]
                    # Only groups every listed signature has are guaranteed.
                    common: set[str] | None = None
                    for sig_id in ids:
                        sig = kb.signatures.get(str(sig_id))
                        groups = set(sig.regex.groupindex) if sig else set()
                        common = groups if common is None else common & groups
                    for group in sorted(common or ()):
                        sig = kb.signatures[str(ids[0])]
                        sample = _sample(sig.model.values.get(group))
                        values[group] = sample
                        values[f"last_{group}"] = sample
                values.update(count=1, line=1, rank=None, ranks=0, timestamp=None)
            bindings[pattern.alias] = values
    return bindings


def check_templates(kb: KnowledgeBase) -> Iterable[Problem]:
    env = environment(kb)
    for loaded in kb.rules:
        model = loaded.model
        context = template_context(synthetic_bindings(kb, loaded), [])
        pieces: list[tuple[tuple[Any, ...], str | None, str | None]] = [(("fix",), model.fix, None), (("fix_template",), None, model.fix_template)]
        for index, step in enumerate(model.patch_plan):
            pieces.append((("patch_plan", index, "target"), step.target, None))
            pieces.append((("patch_plan", index, "change"), step.change, None))
        for index, text in enumerate(model.verify):
            pieces.append((("verify", index), text, None))
        for loc, text, name in pieces:
            if text is None and name is None:
                continue
            try:
                template = env.get_template(name) if name else env.from_string(text or "")
                template.render(**context)
            except Exception as exc:  # noqa: BLE001 - any render failure is the contributor's to fix
                line, col = loaded.origin.at(*loc)
                yield Problem(loaded.origin.display, line, col, "template", f"does not render with the rule's fields: {type(exc).__name__}: {exc}")


def check_sandbox_escape(kb: KnowledgeBase) -> Iterable[Problem]:
    for folder in kb.template_dirs:
        for path in sorted(folder.rglob("*.j2")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for line_no, line in enumerate(text.splitlines(), start=1):
                index = line.find("__")
                if index >= 0 and "{" in line:
                    yield Problem(str(path), line_no, index + 1, "template-internals", "templates may not reach Python internals (dunder attributes)")


PLACEHOLDER = "TODO(rltriage)"


def check_placeholders(kb: KnowledgeBase) -> Iterable[Problem]:
    origins = [s.origin for s in kb.signatures.values()] + [r.origin for r in kb.rules]
    for origin in origins:
        text = origin.path.read_text(encoding="utf-8", errors="replace")
        for line_no, line in enumerate(text.splitlines(), start=1):
            col = line.find(PLACEHOLDER)
            if col >= 0:
                yield Problem(origin.display, line_no, col + 1, "placeholder", "scaffold placeholder left in; fill it in")


CHECKS: tuple[Check, ...] = (
    check_placeholders,check_orphans, check_deprecated_references, check_examples, check_regex_cost, check_templates, check_sandbox_escape)
