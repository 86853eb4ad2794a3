"""Regexes from rule packs: compiled with bounds, matched with a timeout, disabled when slow.

Signature patterns and `matches:` constraints are written by strangers and run over hostile text,
so every one goes through here:

- `compile_bounded` refuses a pattern longer than MAX_PATTERN characters or whose nested counted
  repeats multiply past MAX_REPEAT (`(?:(?:a{1000}){1000}){1000}` would take gigabytes to compile),
  and reports what does not compile (a global flag such as `(?i)` anywhere but at the start, too);
- `BoundedPattern.search` gives up after REGEX_TIMEOUT seconds (TimeoutError);
- within one run (`patterns_run`, entered by each diagnosis), a pattern that timed out once is
  disabled for the rest of the run: `timed_out` says whether to warn (the first time only), and a
  disabled pattern no longer matches anything. One slow pattern costs a run REGEX_TIMEOUT once, not
  once per line.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import regex

REGEX_TIMEOUT = 0.25  # seconds one pattern may spend on one text
MAX_PATTERN = 4096
MAX_REPEAT = 10_000


class PatternError(ValueError):
    """A pattern that may not be used; the message says why."""


_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def repeat_product(pattern: str) -> int:
    """The largest product of nested counted repeats (`{m}`, `{m,n}`) in a pattern: how many times
    its most repeated part is spelled out when it is compiled."""
    stack: list[int] = [1]  # per open group: the largest product found inside it so far
    largest = 1
    last: int | None = None  # the product inside the atom just read: a quantifier multiplies it
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            last = 1
            continue
        if char == "[":
            # A character class is one atom; `]` right after `[` or `[^` is a literal.
            end = index + 1
            if pattern[end : end + 1] == "^":
                end += 1
            if pattern[end : end + 1] == "]":
                end += 1
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            index = end + 1
            last = 1
            continue
        if char == "(":
            stack.append(1)
            last = None
        elif char == ")":
            inner = stack.pop() if len(stack) > 1 else 1
            stack[-1] = max(stack[-1], inner)
            last = inner
        elif char == "{" and last is not None:
            counted = _COUNTED.match(pattern, index)
            if counted and (counted.group(1) or counted.group(2)):
                product = last * max(int(counted.group(1) or 0), int(counted.group(2) or 0), 1)
                stack[-1] = max(stack[-1], product)
                largest = max(largest, product)
                index = counted.end()
                last = None
                continue
            last = 1
        elif char in "|*+?":
            last = None
        else:
            last = 1
        index += 1
    return largest


def _check(pattern: str) -> None:
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"pattern is longer than {MAX_PATTERN} characters")
    product = repeat_product(pattern)
    if product > MAX_REPEAT:
        raise PatternError(f"nested counted repeats multiply to {product}, more than {MAX_REPEAT}")
    # Python's `re` refuses these and `regex` would apply them to the whole pattern; found without
    # compiling the pattern twice (which doubled the knowledge base's load time).
    leading = _LEADING_FLAGS.match(pattern).end()  # type: ignore[union-attr]  # (?i)(?s) at the start is fine
    for flag in _GLOBAL_FLAG.finditer(pattern, leading):
        if not _escaped(pattern, flag.start()):
            raise PatternError(
                f"global flags not at the start of the expression at position {flag.start()}: put inline flags such as (?i) at the start, or use (?i:...)"
            )


_GLOBAL_FLAG = re.compile(r"\(\?[aiLmsux]+\)")
_LEADING_FLAGS = re.compile(r"(?:\(\?[aiLmsux]+\))*")


def leading_flags(pattern: str) -> str:
    """The global flags the pattern starts with (`(?i)(?s)` of `(?i)(?s)x`): the only place they
    may stand (`compile_bounded` refuses them anywhere else)."""
    return _LEADING_FLAGS.match(pattern).group()  # type: ignore[union-attr]


def _escaped(pattern: str, at: int) -> bool:
    """Whether the character at `at` is escaped by an odd number of backslashes."""
    count = 0
    while at - count - 1 >= 0 and pattern[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1


class BoundedPattern:
    """A compiled pattern with a timeout; `name` identifies it for disabling within a run and
    `where` is the file it was written in, for warnings.

    `deferred` (from `compile_bounded(..., deferred=True)`) compiles on first use instead: for the
    patterns of a pack already compiled without error from the same bytes, most of which a run
    never needs (a signature's pattern is only used for the lines the prefilter hands it)."""

    __slots__ = ("name", "where", "_source", "_compiled")

    def __init__(self, name: str, compiled: Any = None, where: str = "", *, source: tuple[str, int] | None = None) -> None:
        self.name = name
        self.where = where
        self._source = source
        self._compiled = compiled

    @property
    def compiled(self) -> Any:
        compiled = self._compiled
        if compiled is None:
            assert self._source is not None
            pattern, flags = self._source
            # Two threads may both compile it; either result is the same pattern.
            compiled = self._compiled = _compile(pattern, flags)
        return compiled

    def __repr__(self) -> str:
        return f"BoundedPattern(name={self.name!r}, where={self.where!r})"

    @property
    def pattern(self) -> str:
        return str(self._source[0]) if self._source is not None else str(self.compiled.pattern)

    @property
    def groupindex(self) -> Any:
        return self.compiled.groupindex

    def search(self, text: str, *, timeout: float = REGEX_TIMEOUT) -> Any:
        """The first match in `text`, or None; TimeoutError when it takes longer than `timeout`.
        A pattern disabled in the current run matches nothing."""
        run = _RUN.get()
        if run is not None and self.name in run.disabled:
            return None
        return self.compiled.search(text, timeout=timeout)

    def found(self, text: str) -> bool:
        """Whether the pattern matches somewhere in `text` (TimeoutError as `search`). Within a run
        the last text tried is remembered with its answer: the facts of many ranks often hold the
        same text (every rank's copy of one exception), and they are tried one after another."""
        run = _RUN.get()
        if run is None or self.name in run.disabled:
            return self.search(text) is not None
        last = run.last_found.get(self)
        if last is not None and last[0] == text:
            return last[1]
        found = self.search(text) is not None
        run.last_found[self] = (text, found)
        return found


def _compile(pattern: str, flags: int) -> Any:
    try:
        return regex.compile(pattern, flags | regex.V0)
    except regex.error as exc:
        raise PatternError(f"pattern does not compile: {exc}") from exc


def compile_bounded(pattern: str, name: str, flags: int = 0, where: str = "", *, deferred: bool = False) -> BoundedPattern:
    """`pattern` compiled with the `regex` module (version 0, Python's `re` syntax); PatternError
    (a ValueError) for a pattern that may not be used or does not compile. With `deferred`, only
    the bounds are checked now and the pattern is compiled when first used: for a pattern known to
    compile (see BoundedPattern)."""
    _check(pattern)
    if deferred:
        return BoundedPattern(name, None, where, source=(pattern, flags))
    return BoundedPattern(name, _compile(pattern, flags), where, source=(pattern, flags))


@functools.lru_cache(maxsize=1024)
def compile_value(pattern: str) -> BoundedPattern | None:
    """A pattern taken from a fact's value at run time (`matches: $alias.field`), compiled under the
    same bounds; None when it may not be used."""
    try:
        return compile_bounded(pattern, f"value pattern {pattern[:60]}")
    except PatternError:
        return None


# --- one run: what timed out ---------------------------------------------------------------------


@dataclass
class SlowPatterns:
    """The patterns that timed out in one run (disabled from then on) and the warnings told about
    them by code that has no warning list of its own (path, message)."""

    disabled: set[str] = field(default_factory=set)
    notes: list[tuple[str, str]] = field(default_factory=list)
    # Per pattern, the last text `BoundedPattern.found` tried and its answer (one entry a pattern:
    # the run lets go of the texts when it ends).
    last_found: dict[BoundedPattern, tuple[str, bool]] = field(default_factory=dict)


_RUN: contextvars.ContextVar[SlowPatterns | None] = contextvars.ContextVar("rltriage_slow_patterns", default=None)


@contextmanager
def patterns_run(reuse: bool = True) -> Iterator[SlowPatterns]:
    """The run that timeouts are counted in; with `reuse`, the one already entered, if any."""
    current = _RUN.get()
    if reuse and current is not None:
        yield current
        return
    run = SlowPatterns()
    token = _RUN.set(run)
    try:
        yield run
    finally:
        _RUN.reset(token)


def timed_out(pattern: BoundedPattern | str) -> bool:
    """Record that a pattern timed out: True the first time in this run (the caller warns), and the
    pattern is disabled for the rest of the run. Outside a run every timeout is told."""
    name = pattern if isinstance(pattern, str) else pattern.name
    run = _RUN.get()
    if run is None:
        return True
    if name in run.disabled:
        return False
    run.disabled.add(name)
    return True


def note(path: str, message: str) -> None:
    """A warning from code without a warning list of its own, kept with the current run."""
    run = _RUN.get()
    if run is not None:
        run.notes.append((path, message))
