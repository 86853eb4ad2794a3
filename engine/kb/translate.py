"""A signature pattern in Hyperscan's syntax, for the scanner's aggregated path.

The scanner's aggregated path lets Hyperscan decide, for a whole chunk of lines at once, which
signature each line matches, so that Python only touches the lines whose values the facts need.
That is only sound on lines where Hyperscan, matching bytes, and `regex`, matching the decoded
line, cannot disagree: lines of printable ASCII, tabs and the block elements tqdm draws its bars
with (U+2580–U+259F). The scanner sends every other line down the full path; here a pattern is
rewritten for those lines only:

- `.`, negated classes and `\\D`, `\\W`, `\\S` match one printable ASCII character or one block element
  (three bytes), never a newline, so a match cannot run into the next line;
- `\\d`, `\\w`, `\\s` and positive classes are ASCII, as they are on such lines in Python;
- the whole expression is followed by `[^\\n]*$`, so Hyperscan reports a matching line once, at its end
  (unless `to_end` is false: the scanner's database takes each match where it ends).

What Hyperscan cannot express is widened instead of refused: lookarounds are dropped, back-references
become a copy of the group they refer to, atomic groups and possessive repeats become plain ones. The
result then matches every line the pattern matches and maybe more, and is marked inexact: the scanner
confirms its hits with the real pattern. A negative lookbehind of one character at the very start of
the pattern is exact as `(?:^|[^…])`, and a negative lookahead of one character at its very end as
`(?:$|[^…])`. Patterns with non-ASCII text, with flags that change `^`/`$`, or
that match the empty string are not translated at all (`None`): their literals keep those lines on the
full path.

For the scanner's one database, a pattern that runs on through a gap (`.*`, `[^\n]*?`) to a literal
is cut before that literal (`loosen`): Hyperscan otherwise runs what comes before the gap to the end of
every line it starts on (every verl metrics line starts every verl metric's pattern), where the cut
form waits for the literal. The cut form is inexact; its hits are confirmed with the whole pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .literals import sre_constants, sre_parse

# One character of a line the aggregated path accepts: printable ASCII or tab (the scanner sends lines
# with other control characters to the full path), or a block element U+2580–U+259F (E2 96 80–9F).
BLOCK_ELEMENT = r"\xe2\x96[\x80-\x9f]"
ASCII_CHARS = frozenset(range(0x80)) - {0x0A}
_DIGIT = frozenset(range(0x30, 0x3A))
_WORD = frozenset([*range(0x30, 0x3A), *range(0x41, 0x5B), *range(0x61, 0x7B), 0x5F])
WIDEST_BOUND = 64  # a bounded repeat with more optional copies than this becomes unbounded (inexact)
_SPACE = frozenset([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20])


@dataclass(frozen=True)
class Translation:
    expression: str  # Hyperscan syntax, to compile with HS_FLAG_MULTILINE (and CASELESS when `caseless`)
    exact: bool  # False: the expression may match lines the pattern does not; hits need confirming
    caseless: bool
    # Where it is inexact only because long bounded repeats were widened: a line of at most this many
    # bytes that the expression matches, the pattern matches too (0: no such length).
    within: int = 0


class _Refused(Exception):
    pass


_CATEGORIES = {
    "CATEGORY_DIGIT": (_DIGIT, False),
    "CATEGORY_NOT_DIGIT": (_DIGIT, True),
    "CATEGORY_WORD": (_WORD, False),
    "CATEGORY_NOT_WORD": (_WORD, True),
    "CATEGORY_SPACE": (_SPACE, False),
    "CATEGORY_NOT_SPACE": (_SPACE, True),
}


def _category(code: Any) -> tuple[frozenset[int], bool]:
    """ASCII members of a category, and whether it also holds the block elements (its complement does)."""
    members, negated = _CATEGORIES[str(code)]
    return (ASCII_CHARS - members, True) if negated else (members & ASCII_CHARS, False)


def _ranges(chars: frozenset[int]) -> str:
    """The characters as the inside of a class: `\\x41-\\x5a\\x5f`."""
    ordered = sorted(chars)
    ranges: list[str] = []
    index = 0
    while index < len(ordered):
        low = ordered[index]
        while index + 1 < len(ordered) and ordered[index + 1] == ordered[index] + 1:
            index += 1
        high = ordered[index]
        ranges.append(f"\\x{low:02x}" if low == high else f"\\x{low:02x}-\\x{high:02x}")
        index += 1
    return "".join(ranges)


def _set(chars: frozenset[int], block: bool) -> str:
    chars = chars - {0x0A}
    if not chars and not block:
        raise _Refused("a class that matches nothing on a line")
    alternatives = [f"[{_ranges(chars)}]"] if chars else []
    if block:
        alternatives.append(BLOCK_ELEMENT)
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


_ONE_CHAR = ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY")


def _starts_with_a_character(item: Any) -> bool:
    """Whether the item matches at least one character first (no assertion, nothing optional)."""
    op, av = item
    name = str(op)
    if name in _ONE_CHAR:
        return True
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        body = list(av[2])
        return av[0] >= 1 and bool(body) and _starts_with_a_character(body[0])
    if name == "SUBPATTERN":
        body = list(av[-1])
        return bool(body) and _starts_with_a_character(body[0])
    return False


def _class_set(items: Any) -> tuple[frozenset[int], bool]:
    """The ASCII characters a class matches, and whether it matches the block elements."""
    negate = False
    chars: set[int] = set()
    block = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            if av >= 0x80:
                raise _Refused("a non-ASCII character in a class")
            chars.add(av)
        elif name == "RANGE":
            low, high = av
            if high >= 0x80:
                raise _Refused("a class range beyond ASCII")
            chars.update(range(low, high + 1))
        elif name == "CATEGORY":
            members, holds_block = _category(av)
            chars.update(members)
            block = block or holds_block
        else:
            raise _Refused(f"{name} in a class")
    if negate:
        return ASCII_CHARS - chars, not block
    return frozenset(chars), block


def _one_char_set(op: Any, av: Any) -> tuple[frozenset[int], bool]:
    name = str(op)
    if name == "LITERAL":
        if av >= 0x80 or av == 0x0A:
            raise _Refused("a non-ASCII character or a newline")
        return frozenset([av]), False
    if name == "NOT_LITERAL":
        if av >= 0x80:
            raise _Refused("a non-ASCII character")
        return ASCII_CHARS - {av}, True
    if name == "ANY":
        return ASCII_CHARS, True
    if name == "IN":
        return _class_set(av)
    if name == "CATEGORY":
        return _category(av)
    raise _Refused(name)


class _Translator:
    def __init__(self, groups: dict[int, Any]) -> None:
        self.exact = True
        self.groups = groups  # group number -> parsed body, for back-references
        self.depth = 0
        self.ends_line = False  # the pattern's last element is `$`: no `[^\n]*$` is appended
        self.caseless = False
        self.start = "^"  # what stands for the start of the text the pattern is matched on
        self.widest = WIDEST_BOUND
        # The fewest copies a widened repeat allowed (None: none widened; 0: one whose copy may be
        # empty). Each other copy takes a byte at least, so on a line of at most that many bytes a
        # widened repeat takes no more copies than its bound: the widening changes nothing there.
        self.within: int | None = None

    def sequence(self, items: Any, at_start: bool, at_end: bool = False) -> str:
        out: list[str] = []
        items = list(items)
        skip = False
        for index, (op, av) in enumerate(items):
            if skip:
                skip = False
                continue
            guarded = self.guarded_star(items, index)
            if guarded is not None:
                out.append(guarded)
                skip = True
                continue
            last = index == len(items) - 1
            # What follows starts with a character, or is the end of the pattern (the end of the line
            # or what a final lookahead allows, which starts with a character too).
            before_character = (at_end and last) or (not last and _starts_with_a_character(items[index + 1]))
            out.append(self.element(op, av, at_start and index == 0, at_end and last, before_character))
        return "".join(out)

    def guarded_star(self, items: list[Any], index: int) -> str | None:
        """`c S*(?<!C)`: a literal, an unbounded repeat of one character, then a one-character negative
        lookbehind. The character before what follows is the repeat's last, or `c` when it repeats
        nothing: `S*` becomes `(?:S*[S-C])?` when `c` is not in C, `S*[S-C]` when it is."""
        if index == 0 or index + 1 >= len(items):
            return None
        before, (op, av), (next_op, next_av) = items[index - 1], items[index], items[index + 1]
        if str(op) not in ("MAX_REPEAT", "MIN_REPEAT") or av[0] != 0 or av[1] != sre_constants.MAXREPEAT or str(before[0]) != "LITERAL":
            return None
        body = list(av[2])
        if str(next_op) != "ASSERT_NOT" or next_av[0] >= 0 or len(body) != 1 or len(list(next_av[1])) != 1:
            return None
        star_chars, star_block = _one_char_set(*body[0])
        guard_chars, guard_block = _one_char_set(*list(next_av[1])[0])
        if self.caseless and any(chr(c).isalpha() for c in (*guard_chars, before[1]) if c < 0x80):
            return None  # case folding would have to be applied to the sets: widened instead
        last = _set(star_chars - guard_chars, star_block and not guard_block)
        star = _set(star_chars, star_block) + "*"
        return f"(?:{star}{last})?" if before[1] not in guard_chars else f"{star}{last}"

    @staticmethod
    def byte_run(body: Any, low: int, high: int) -> str | None:
        """`.*`, `[^|]+` and the like as a run of bytes: `[^\\n]*`, not a run of characters each one
        byte or three (a block element). Hyperscan runs the byte class several times faster. On the
        lines the translation is for, the same spans match, as long as the run starts and ends between
        characters: it follows a whole character (or the start), and what follows it starts with a
        character, whose first byte is ASCII or a block element's first byte, never one inside a
        block element. Only for unbounded runs of at least no or one character: a count of bytes is
        not a count of characters. None when it does not apply."""
        items = list(body)
        if high != sre_constants.MAXREPEAT or low > 1 or len(items) != 1 or str(items[0][0]) not in _ONE_CHAR:
            return None
        chars, block = _one_char_set(*items[0])
        if not block:
            return None
        return f"[{_ranges(chars - {0x0A})}\\x80-\\xff]" + ("*" if low == 0 else "+")

    def element(self, op: Any, av: Any, at_start: bool, at_end: bool = False, before_character: bool = False) -> str:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"):
            return _set(*_one_char_set(op, av))
        if name == "AT":
            code = str(av)
            if code in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
                return self.start
            if code in ("AT_END", "AT_END_STRING"):
                if at_end and self.ends_line:
                    return "$"
                self.exact = False  # Hyperscan has no `$` before the end of a pattern: widened
                return ""
            if code == "AT_BOUNDARY":
                return r"\b"
            if code == "AT_NON_BOUNDARY":
                return r"\B"
            raise _Refused(code)
        if name == "SUBPATTERN":
            group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise _Refused("flags on a group")
            if group is not None:
                self.groups[group] = body
            return "(?:" + self.sequence(body, at_start, at_end) + ")"
        if name == "BRANCH":
            return "(?:" + "|".join(self.sequence(branch, at_start, at_end) for branch in av[1]) + ")"
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, body = av
            if name == "POSSESSIVE_REPEAT":
                self.exact = False
            if high != sre_constants.MAXREPEAT and high - low > self.widest:
                self.within = 0 if body.getwidth()[0] == 0 or self.within == 0 else min(high, self.within or high)
                high = sre_constants.MAXREPEAT  # long bounded repeats cost seconds to compile: widened
                self.exact = False
            bound = f"{{{low},}}" if high == sre_constants.MAXREPEAT else f"{{{low},{high}}}"
            run = self.byte_run(body, low, high) if before_character else None
            return run if run is not None else "(?:" + self.sequence(body, False) + ")" + bound
        if name == "ATOMIC_GROUP":
            self.exact = False
            return "(?:" + self.sequence(av, at_start) + ")"
        if name in ("ASSERT", "ASSERT_NOT"):
            direction, body = av
            items = list(body)
            if name == "ASSERT_NOT" and direction < 0 and at_start and len(items) == 1:
                # (?<!C) before the first character: the line starts there, or a character not in C
                # precedes it. Consuming that character does not change whether the line matches.
                chars, block = _one_char_set(*items[0])
                return f"(?:{self.start}|" + _set(ASCII_CHARS - chars, not block) + ")"
            self.exact = False
            return ""
        if name == "GROUPREF":
            body = self.groups.get(av)
            if body is None or self.depth > 4:
                raise _Refused("a back-reference")
            self.exact = False
            self.depth += 1
            try:
                return "(?:" + self.sequence(body, False) + ")"
            finally:
                self.depth -= 1
        raise _Refused(name)


def translate(
    pattern: str, ignore_case: bool, start: str = "^", widest: int = WIDEST_BOUND, loosen: bool = False, to_end: bool = True
) -> Translation | None:
    """The pattern in Hyperscan syntax for lines the aggregated path accepts, or None. `start` is
    what `^` (and the start a leading lookbehind allows) becomes; bounded repeats with more than
    `widest` optional copies become unbounded. With `loosen`, an exact translation of a pattern that
    runs on through a long gap to a literal (`step:\\d+ - .*critic/score/max:`) is cut before that
    literal: see `_gap`. Without `to_end`, the expression is not run on to the line's end: Hyperscan
    then reports it where each match ends (a few times a line at most, the pattern's tail being trimmed)
    and spares the run to the end, which costs most on long lines many signatures match."""
    if not pattern.isascii():
        return None
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - the `regex` dialect is wider than `re`: not translated
        return None
    flags = parsed.state.flags
    if flags & (sre_constants.SRE_FLAG_MULTILINE | sre_constants.SRE_FLAG_LOCALE):
        return None
    items = list(parsed)
    if not _has(items, "GROUPREF"):
        items = _trim(items)
    if not items:
        return None
    translator = _Translator({})
    translator.start = start
    translator.widest = widest
    translator.caseless = ignore_case or bool(flags & sre_constants.SRE_FLAG_IGNORECASE)
    translator.ends_line = str(items[-1][0]) == "AT" and str(items[-1][1]) in ("AT_END", "AT_END_STRING")
    rest = r"[^\n]*$"
    following = _following(items[-1], translator.caseless)
    if following is not None and len(items) > 1:
        # (?!C) at the very end: the line ends there, or a character not in C follows (Hyperscan
        # has no `$` inside a pattern, so the two ways are one optional group before the end).
        items, rest = items[:-1], f"(?:{following}{rest[:-1]})?$"
    elif not to_end:
        rest = ""
    try:
        body = translator.sequence(items, True, True)
    except (_Refused, KeyError):
        return None
    caseless = ignore_case or bool(flags & sre_constants.SRE_FLAG_IGNORECASE)
    cut = _gap(items) if loosen and translator.exact and translator.within is None else None
    if cut is not None:
        # What follows the gap matches wherever the whole pattern does, so the cut expression matches
        # every line the pattern matches (and maybe more: inexact, its hits are confirmed with the
        # exact translation). Hyperscan then runs the head and the gap only on lines holding the
        # literal, where before it ran them to the end of every line the head started on.
        loose = _Translator({})
        loose.start, loose.widest, loose.caseless, loose.ends_line = start, widest, caseless, translator.ends_line
        try:
            body = loose.sequence(items[cut:], False, True)
        except (_Refused, KeyError):
            return None
        return Translation("(?:" + body + ")" + ("" if translator.ends_line else rest), False, caseless, 0)
    return Translation("(?:" + body + ")" + ("" if translator.ends_line else rest), translator.exact, caseless, translator.within or 0)


GAP_LITERAL = 4  # the fewest characters a cut translation starts with (Hyperscan finds them as a literal)
_WIDE = 90  # a repeated class of at least this many ASCII characters is a gap (`.`, `[^,]`, `\S`)


def _gap(items: list[Any]) -> int | None:
    """Where to cut a pattern for `translate(loosen=True)`: after its last top-level item that holds
    an unbounded run of a wide class (a gap, which may span most of a line), when what follows starts
    with at least GAP_LITERAL literal characters; None when there is no such item, or the pattern
    refers back to a group."""
    if _has(items, "GROUPREF"):
        return None
    for index in range(len(items) - 2, -1, -1):
        if _holds_gap(*items[index]):
            return index + 1 if _lead(items[index + 1 :]) >= GAP_LITERAL else None
    return None


def _holds_gap(op: Any, av: Any) -> bool:
    name = str(op)
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, high, body = av
        items = list(body)
        if high == sre_constants.MAXREPEAT and len(items) == 1 and str(items[0][0]) in _ONE_CHAR:
            try:
                chars, _block = _one_char_set(*items[0])
            except _Refused:
                return False
            if len(chars) >= _WIDE:
                return True
        return any(_holds_gap(o, a) for o, a in items)
    if name == "SUBPATTERN":
        return any(_holds_gap(o, a) for o, a in av[-1])
    if name == "BRANCH":
        return any(_holds_gap(o, a) for branch in av[1] for o, a in branch)
    return False


def _lead(items: list[Any]) -> int:
    """How many literal characters every match of the items starts with (an assertion before them,
    which the cut translation drops, takes none)."""
    count = 0
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            count += 1
            continue
        if name in ("ASSERT", "ASSERT_NOT", "AT") and not count:
            continue
        if name == "SUBPATTERN" and not av[1] and not av[2]:
            return count + _lead(list(av[-1]))
        if name == "BRANCH":
            return count + min(_lead(list(branch)) for branch in av[1])
        return count
    return count


def _following(item: Any, caseless: bool) -> str | None:
    """For a negative lookahead of one character, `(?!C)`, the set of what may follow instead (one
    character not in C); None for anything else, and when case folding would have to apply to C."""
    op, av = item
    if str(op) != "ASSERT_NOT" or av[0] < 0 or len(list(av[1])) != 1:
        return None
    try:
        chars, block = _one_char_set(*list(av[1])[0])
    except _Refused:
        return None
    if not chars or (caseless and any(chr(c).isalpha() for c in chars)):
        return None
    return _set(ASCII_CHARS - chars, not block)


def _has(items: Any, wanted: str) -> bool:
    for op, av in items:
        name = str(op)
        if name == wanted:
            return True
        if name == "SUBPATTERN" and _has(av[-1], wanted):
            return True
        if name == "BRANCH" and any(_has(branch, wanted) for branch in av[1]):
            return True
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and _has(av[2], wanted):
            return True
        if name in ("ATOMIC_GROUP",) and _has(av, wanted):
            return True
        if name in ("ASSERT", "ASSERT_NOT") and _has(av[1], wanted):
            return True
    return False


def _optional(op: Any, av: Any) -> bool:
    """Whether an element can match nothing whatever surrounds it (no assertion decides it)."""
    name = str(op)
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return bool(av[0] == 0)
    if name == "SUBPATTERN":
        return all(_optional(o, a) for o, a in av[-1])
    if name == "ATOMIC_GROUP":
        return all(_optional(o, a) for o, a in av)
    if name == "BRANCH":
        return any(all(_optional(o, a) for o, a in branch) for branch in av[1])
    return False


def _trim(items: list[Any]) -> list[Any]:
    """The pattern without what it may end (or, unanchored, start) with but need not match: a line
    holds a match of `A B?` exactly when it holds one of `A`; of `A B{2,5}` exactly when `A B{2}`;
    of `A (?:B|C+)` exactly when `A (?:B|C)`. A match then ends where the shortest one does, and the
    scan database, which reports every end, reports few."""
    items = _trim_tail(items)
    if items and str(items[0][0]) not in ("AT", "ASSERT", "ASSERT_NOT"):
        while items and _optional(*items[0]):
            items.pop(0)
    return items


def _trim_tail(items: list[Any]) -> list[Any]:
    items = list(items)
    while True:
        while items and _optional(*items[-1]):
            items.pop()
        if not items:
            return items
        op, av = items[-1]
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] > 1:
            items[-1] = (op, (av[0], av[0], av[2]))
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] == 1:
            body = _trim_tail(list(av[2]))
            if not body:  # `(?:b?)+`: one copy of nothing
                items.pop()
                continue
            items[-1] = (op, (1, 1, body))
        elif name == "SUBPATTERN":
            items[-1] = (op, (*av[:-1], _trim_tail(list(av[-1]))))
        elif name == "BRANCH":
            branches = [_trim_tail(list(branch)) for branch in av[1]]
            if not all(branches):
                items.pop()  # a branch that may match nothing: the line holds a match without it
                continue
            items[-1] = (op, (av[0], branches))
        return items
