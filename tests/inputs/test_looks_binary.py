"""Binary sniffing: more than a tenth of control bytes (other than tab, line breaks, form feed and
escape), or any NUL, is binary content."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rltriage.inputs.discover import looks_binary


def _by_the_definition(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    control = sum(1 for b in head if b < 9 or 13 < b < 32 and b != 27)
    return bool(head) and control > len(head) * 0.1


@given(st.binary(max_size=300) | st.text(alphabet="ab\t\n\r\x0b\x0c\x1b\x01\x07\x1f\x7f é", max_size=300).map(lambda t: t.encode()))
def test_sniffing_follows_the_definition(head: bytes) -> None:
    assert looks_binary(head) == _by_the_definition(head)


def test_text_with_colours_and_tabs_is_text_and_a_few_control_bytes_are_binary() -> None:
    assert not looks_binary(b"\x1b[31mError\x1b[0m\tat step 3\r\n" * 10)
    assert looks_binary(b"ab\x01\x02" * 10) and looks_binary(b"text\x00")
