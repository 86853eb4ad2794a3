"""Required literal text of a signature pattern, for the multi-pattern prefilter of the scanner.

A line can only match a signature if it contains one of the signature's literals, so the scanner
looks for all literals of all signatures in whole chunks at once and runs the exact pattern only on
the lines that contain one.
"""

from __future__ import annotations

from typing import Any

try:  # Python 3.11+
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from .regexes import leading_flags


def _runs(items: Any) -> list[list[str]]:
    """Alternative sets of required literal runs in a parsed sequence.

    Returns a list of candidates; each candidate is a list of strings of which at least one occurs
    in every matching text (a one-element list is a single required run).
    """
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(["".join(run)])
            run.clear()

    for op, av in items:
        if op is sre_constants.LITERAL:
            run.append(chr(av))
            continue
        flush()
        if op is sre_constants.SUBPATTERN:
            candidates.extend(_runs(av[-1]))
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)):
            low, _high, body = av
            if low >= 1:
                candidates.extend(_runs(body))
        elif op is sre_constants.BRANCH:
            alternatives: list[str] = []
            for branch in av[1]:
                best = _best(_runs(branch))
                if best is None:
                    alternatives = []
                    break
                alternatives.extend(best)
            if alternatives:
                candidates.append(sorted(set(alternatives)))
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            candidates.extend(_runs(av))
    flush()
    return candidates


def _best(candidates: list[list[str]]) -> list[str] | None:
    usable = [c for c in candidates if c and min(len(s) for s in c) >= 3]
    if not usable:
        return None
    # Prefer the candidate whose weakest literal is longest: fewer false candidate lines.
    return max(usable, key=lambda c: (min(len(s) for s in c), -len(c)))


def required_literals(pattern: str) -> list[str] | None:
    """Literals of which every match contains at least one, or None when none can be derived."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - the `regex` dialect is wider than `re`; no literal then
        return None
    return _best(_runs(list(parsed)))


def is_case_insensitive(pattern: str) -> bool:
    """Whether the whole pattern ignores case: a global `(?i)`, which may only stand at its start."""
    return "i" in leading_flags(pattern)


def group_sets(pattern: str, limit: int = 8) -> list[set[str]] | None:
    """The possible sets of named groups a match sets for sure: one set per way through the
    pattern's alternations (optional parts set nothing for sure). None when it cannot be analysed."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001
        return None
    names = {index: name for name, index in parsed.state.groupdict.items()}

    def seq(items: Any) -> list[frozenset[int]]:
        ways: list[frozenset[int]] = [frozenset()]
        for op, av in items:
            options = element(op, av)
            ways = list(dict.fromkeys(w | o for w in ways for o in options))[:limit]
        return ways

    def element(op: Any, av: Any) -> list[frozenset[int]]:
        if op is sre_constants.SUBPATTERN:
            inner = seq(av[-1])
            return [w | {av[0]} for w in inner] if av[0] is not None else inner
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)):
            return seq(av[2]) if av[0] >= 1 else [frozenset()]
        if op is sre_constants.BRANCH:
            return [w for branch in av[1] for w in seq(branch)][:limit]
        if op is getattr(sre_constants, "ATOMIC_GROUP", None):
            return seq(av)
        return [frozenset()]

    return [{names[i] for i in way if i in names} for way in seq(list(parsed))]


def implied(pattern: str, literals: list[str], ignore_case: bool) -> bool:
    """Whether every match of the pattern holds one of the literals (as hand-declared literals should)."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001
        return False
    fold = (lambda text: text.lower()) if ignore_case else (lambda text: text)
    declared = [fold(literal) for literal in literals]
    candidates = _runs(list(parsed)) + _spelled(list(parsed))
    return any(all(any(d in fold(alternative) for d in declared) for alternative in candidate) for candidate in candidates if candidate)


def _spelled(items: Any, limit: int = 64) -> list[list[str]]:
    """Runs of text spelled out across alternations of plain text: `completion(?:_length|s/mean_length)`
    (as `re` factors `completion_length|completions/mean_length`) gives both words."""
    candidates: list[list[str]] = []
    current: list[str] = [""]

    def flush() -> None:
        nonlocal current
        if any(current):
            candidates.append(sorted(set(current)))
        current = [""]

    for op, av in items:
        if op is sre_constants.LITERAL:
            current = [text + chr(av) for text in current]
            continue
        words = _words(op, av)
        if words is not None and len(current) * len(words) <= limit:
            current = [text + word for text in current for word in words]
            continue
        flush()
        if op is sre_constants.SUBPATTERN:
            candidates.extend(_spelled(av[-1], limit))
    flush()
    return candidates


def _words(op: Any, av: Any) -> list[str] | None:
    """The texts an alternation (or a group of one) of plain text can spell, or None."""
    if op is sre_constants.SUBPATTERN:
        body = list(av[-1])
        if len(body) == 1:
            return _words(*body[0])
        if all(o is sre_constants.LITERAL for o, _a in body):
            return ["".join(chr(a) for _o, a in body)]
        return None
    if op is sre_constants.BRANCH:
        out: list[str] = []
        for branch in av[1]:
            if not all(o is sre_constants.LITERAL for o, _a in branch):
                return None
            out.append("".join(chr(a) for _o, a in branch))
        return out
    if op is sre_constants.IN and all(o is sre_constants.LITERAL for o, _a in av):
        return [chr(a) for _o, a in av]
    return None
