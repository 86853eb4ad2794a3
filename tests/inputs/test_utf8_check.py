"""The reader's UTF-8 check names the first bad byte's offset in the file, however the file is cut
into reads and the reads into slices, and it never builds text the size of a read."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltriage.inputs import discover
from rltriage.inputs.discover import Checked, Warning

# Text with characters of one to four bytes, and bytes that no UTF-8 text holds where they stand.
TEXT = st.text(alphabet=st.sampled_from(["a", "\n", "é", "█", "€", "😀", " "]), max_size=60)
BAD = st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"])


def _bad_offset(data: bytes, read: int) -> int | None:
    warnings: list[Warning] = []
    stream = Checked(io.BytesIO(data), "x.log", warnings)
    while stream.read(read):
        pass
    stream.close()
    told = [w.message for w in warnings if w.message.startswith("not valid UTF-8")]
    if not told:
        return None
    return int(told[0].split("offset ")[1].split(")")[0])


def _first_bad(data: bytes) -> int | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


@settings(max_examples=300, deadline=None)
@given(head=TEXT, bad=BAD, tail=TEXT, read=st.integers(1, 40), slice_=st.integers(1, 9))
def test_the_first_bad_byte_is_named_wherever_the_reads_and_slices_cut(head: str, bad: bytes, tail: str, read: int, slice_: int) -> None:
    data = head.encode() + bad + tail.encode() + b"\xff"  # a last bad byte: a cut sequence is told too
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(discover, "UTF8_SLICE", slice_)
        assert _bad_offset(data, read) == _first_bad(data)


def test_valid_text_is_not_told() -> None:
    assert _bad_offset(("█ step 3 é 😀\n" * 5000).encode(), 4096) is None


def test_a_read_is_checked_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A read of a MiB of progress bars would otherwise be decoded into a str of 2 MiB at once.
    decoded: list[int] = []
    factory = discover.codecs.getincrementaldecoder
    real = factory("utf-8")

    class Recording(real):  # type: ignore[misc,valid-type]
        def decode(self, data: bytes, final: bool = False) -> str:
            text = super().decode(data, final)
            decoded.append(len(text))
            return text

    monkeypatch.setattr(discover.codecs, "getincrementaldecoder", lambda name: Recording if name == "utf-8" else factory(name))
    assert _bad_offset(("█" * 100 + "\n").encode() * 4000, 1 << 20) is None
    assert decoded and max(decoded) <= discover.UTF8_SLICE
    assert sum(decoded) == 101 * 4000
