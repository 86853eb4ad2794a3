"""Text that is safe to print: what a log or a file name holds must not drive the terminal or forge
lines of a report.

Control characters (C0 except tab, DEL and C1, which covers `ESC c` resets and 8-bit CSI) become
`?`; a newline becomes `?` too unless the text is allowed several lines. Bytes that were not valid in
a file name (surrogate escapes) are shown as `\\xNN`, so they stay distinct and every output format,
JSON included, can carry them.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROL_KEEP_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def _surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "?"


# Colour and cursor sequences (CSI) and two-character escapes are dropped whole, as the text report
# always did with colour codes, so `ESC[36m` does not become `?[36m`; any other ESC becomes `?`.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def printable(text: str, multiline: bool = False) -> str:
    """`text` without colour codes, with other control characters as `?` (newlines kept when
    `multiline`) and undecodable file-name bytes as `\\xNN`."""
    if not _UNSAFE.search(text):
        return text
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = _SURROGATE.sub(_surrogate, text)
    return (_CONTROL_KEEP_NEWLINE if multiline else _CONTROL).sub("?", text)
