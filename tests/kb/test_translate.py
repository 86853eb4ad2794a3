"""Translation to Hyperscan: a translation marked exact matches exactly the lines the pattern matches."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.kb.translate import translate

hyperscan = pytest.importorskip("hyperscan")

# One-character negative lookarounds at the pattern's very start and end are translated exactly; others widen.
EXACT = [
    r"x(?P<v>\d+)(?![\w.])",
    r"(?:(?<![\w/])actor/entropy(?:_loss)?:|'entropy': '?)(?P<entropy>\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w.])",
    r"(?:a|b:)(?P<n>\d+)(?!\d)",
    r"step (?P<n>\d+)(?!%)",
]
WIDENED = [r"(?i)abc(?!d)", r"x(?!\d)y", r"x(?!ab)", r"a(?!\d)|b:"]


def _database(expression: str, caseless: bool) -> object:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    flags = hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_CASELESS if caseless else 0)
    database.compile(expressions=[expression.encode()], ids=[0], elements=1, flags=[flags])
    return database


def _lines_matched(database: object, lines: list[str]) -> set[int]:
    # Every line ends with a newline, as the scanner's chunks do (Hyperscan 0.9.1 can miss a match
    # that starts two bytes before the end of a longer buffer: `x\d+` in 15 bytes then `x1`).
    data = "".join(line + "\n" for line in lines).encode()
    starts = [0]  # in bytes, as Hyperscan reports where a match ends
    for line in lines:
        starts.append(starts[-1] + len(line.encode()) + 1)
    found: set[int] = set()

    def on_match(_id: int, _start: int, end: int, _flags: int, _context: object) -> None:
        found.add(max(i for i, s in enumerate(starts) if s <= end and i < len(lines)))

    database.scan(data, match_event_handler=on_match)  # type: ignore[attr-defined]
    return found


def test_edge_lookarounds_are_exact_and_others_widen() -> None:
    assert all(translate(p, False).exact for p in EXACT)  # type: ignore[union-attr]
    assert not any(translate(p, False).exact for p in WIDENED)  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="xab1.5 :%'/_-eystpXactor/entropy_loss", max_size=30), min_size=1, max_size=20))
def test_an_exact_translation_matches_the_lines_the_pattern_matches(lines: list[str]) -> None:
    for pattern in EXACT:
        compiled = regex.compile(pattern)
        expected = {i for i, line in enumerate(lines) if compiled.search(line)}
        for to_end in (True, False):
            translation = translate(pattern, False, to_end=to_end)
            assert translation is not None and translation.exact
            assert _lines_matched(_database(translation.expression, translation.caseless), lines) == expected, (pattern, to_end)


def test_a_translation_not_run_to_the_end_ends_where_the_shortest_match_does() -> None:
    # The tail a line need not hold is trimmed (in groups and branches too), so the database reports
    # a match once or a few times a line, not at every digit of `\d+`.
    assert translate(r"x(?P<v>[-\d.]+|nan)", False, to_end=False).expression == "(?:[\\x78](?:(?:(?:[\\x2d-\\x2e\\x30-\\x39]){1,1}|[\\x6e][\\x61][\\x6e])))"  # type: ignore[union-attr]
    assert translate(r"a(?:b|c?)", False, to_end=False).expression == "(?:[\\x61])"  # type: ignore[union-attr]
    assert translate(r"a(?:b?)+", False, to_end=False).expression == "(?:[\\x61])"  # type: ignore[union-attr]
    assert translate(r"a\d+", False).expression.endswith("[^\\n]*$")  # type: ignore[union-attr]
    assert translate(r"a\d+(?!\d)", False, to_end=False).expression.endswith("$")  # type: ignore[union-attr]  # the lookahead needs the end


# Widened bounded repeats, and the length of line up to which the widened translation is still exact.
WITHIN = [
    (r"a[^|]{0,80}\|b", False, 80),
    (r"a.{0,100}b.{5,300}c", False, 100),  # the fewest copies any widened repeat allows
    (r"a(?:b?){0,100}c", False, 0),  # a copy may be empty: no length keeps the copies within the bound
    (r"a.{0,10}c", True, 0),  # not widened
]


@pytest.mark.parametrize(("pattern", "exact", "within"), WITHIN)
def test_a_widened_translation_says_how_long_a_line_it_is_still_exact_on(pattern: str, exact: bool, within: int) -> None:
    translation = translate(pattern, False)
    assert translation is not None and translation.exact == exact and translation.within == within


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="ab|x", max_size=120), min_size=1, max_size=20))
def test_a_widened_translation_matches_exactly_the_lines_no_longer_than_its_length(lines: list[str]) -> None:
    pattern = r"a[^|]{0,80}\|b"
    translation = translate(pattern, False)
    assert translation is not None and not translation.exact and translation.within == 80
    compiled = regex.compile(pattern)
    matched = _lines_matched(_database(translation.expression, translation.caseless), lines)
    for number, line in enumerate(lines):
        if len(line.encode()) <= translation.within:
            assert (number in matched) == (compiled.search(line) is not None), line
        elif compiled.search(line) is not None:
            assert number in matched, line  # longer lines: a superset, to confirm


# Runs of any character but a few become runs of bytes; on lines of ASCII and block elements the
# same lines match, whatever follows the run (a character, a class with block elements, the end, or
# an assertion, where the run stays a run of characters).
RUNS = [r"a.*b", r"a[^|]+\|b", r"x.*\Wb", r"a.*[^a]b", r"a.*\bx", r"a.*\B", r"a.*\Bx", r"(?:a.*)b.*", r"a\S+\s", r"a[^b]*$"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab|x █▏ c", max_size=20), min_size=1, max_size=20))
def test_runs_of_bytes_match_the_lines_runs_of_characters_match(lines: list[str]) -> None:
    for pattern in RUNS:
        translation = translate(pattern, False)
        assert translation is not None and translation.exact, pattern
        compiled = regex.compile(pattern)
        expected = {i for i, line in enumerate(lines) if compiled.search(line)}
        assert _lines_matched(_database(translation.expression, translation.caseless), lines) == expected, pattern


def test_a_run_becomes_a_run_of_bytes_only_before_a_character_or_the_end() -> None:
    assert "\\x80-\\xff]*" in translate(r"a.*b", False).expression  # type: ignore[union-attr]
    assert "\\x80-\\xff]" not in translate(r"a.*\bx", False).expression  # type: ignore[union-attr]
    assert "\\x80-\\xff]" not in translate(r"a.{2,}b", False).expression  # type: ignore[union-attr]


# Cut at a gap: the part after the pattern's last wide unbounded run, when it starts with a literal of
# at least GAP_LITERAL characters (an assertion before it is dropped); None where there is no such cut.
LOOSENED = [
    (r"(?<![\w/])step:(?P<s>\d+) - [^\n]*?(?<![\w/-])critic/score/max:(?P<v>[-\d.e+]+|nan)", "critic/score/max:", "x critic/score/max:1"),
    (r"^\{'loss': (?P<l>[\d.]+),.*?'grad_norm': (?P<g>[\d.]+),.*?'learning_rate': (?P<r>[\d.e-]+)", "'learning_rate': ", "{'learning_rate': 1"),
    (r"^\{'.*'(?:reward|rewards/(?P<f>[\w.-]+?))': (?P<r>[\d.]+)", "'reward", "x 'reward': 1"),
    (r"step:\d+ - (?:.*[^\w-])?actor/lr:(?P<lr>[\d.e-]+)", "actor/lr:", "step: actor/lr:1"),
]
NOT_LOOSENED = [
    r"^\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+)",  # one literal character after the gap
    r"a.*(b)x\1yyyy",  # a back-reference
    r"abc\d+ def [\w.]+ ghij",  # no wide run ([\w.] is not one)
    r"a.*b(?=c)cdef",  # inexact before any cut: the full translation widens a lookahead
]


@pytest.mark.parametrize(("pattern", "literal", "loose_only"), LOOSENED)
def test_a_pattern_with_a_gap_before_a_literal_is_cut_there(pattern: str, literal: str, loose_only: str) -> None:
    full, loose = translate(pattern, False), translate(pattern, False, loosen=True)
    assert full is not None and full.exact
    assert loose is not None and not loose.exact and loose.within == 0
    lead = "".join(f"[\\x{ord(c):02x}]" for c in literal)
    assert loose.expression.startswith("(?:" + lead) or loose.expression.startswith("(?:(?:" + lead), loose.expression
    # A line with what follows the gap but not what comes before it: the cut form matches it, the
    # pattern (and the full translation) do not. The scanner confirms such hits.
    assert regex.search(pattern, loose_only) is None
    assert _lines_matched(_database(loose.expression, False), [loose_only]) == {0}
    assert _lines_matched(_database(full.expression, False), [loose_only]) == set()


@pytest.mark.parametrize("pattern", NOT_LOOSENED)
def test_a_pattern_without_such_a_gap_is_translated_as_without_loosen(pattern: str) -> None:
    assert translate(pattern, False, loosen=True) == translate(pattern, False)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(
                # Whole lines of each pattern, and the pieces they are made of.
                ["step:1 - critic/score/max:1", "{'loss': 0.5, 'grad_norm': 0.5, 'learning_rate': 1e-06", "{'x': 1, 'reward': 0.5", "step:1 - x/actor/lr:1"]
                + ["step:", "1", " - ", "critic/score/max:", "x", "{'loss': ", "0.5,", " 'grad_norm': ", "'learning_rate': ", "'reward", "': ", "rewards/", "actor/lr:", "/", "█"]
            ),
            max_size=6,
        ).map("".join),
        min_size=1,
        max_size=20,
    )
)
def test_a_cut_translation_matches_every_line_the_pattern_matches(lines: list[str]) -> None:
    for pattern, _literal, loose_only in LOOSENED:
        loose = translate(pattern, False, loosen=True)
        assert loose is not None
        compiled = regex.compile(pattern)
        expected = {i for i, line in enumerate(lines) if compiled.search(line)}
        assert expected <= _lines_matched(_database(loose.expression, loose.caseless), [*lines, loose_only]), pattern
