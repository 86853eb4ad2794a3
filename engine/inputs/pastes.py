"""A log pasted as an indented block (Markdown's four-space code block, a forum quote, an e-mail
reply): every line carries the same leading whitespace the program never printed. Taken off, the
lines read as the program wrote them: a traceback's header starts its line again, and patterns
anchored at the start of a line match."""

from __future__ import annotations

import re

MIN_LINES = 3  # non-blank lines the first block must have for its indentation to mean anything
# Four spaces or a tab at least: tqdm pads its percentage with up to two spaces, and a log of
# nothing but progress bars is not a pasted block.
_INDENT = re.compile(rb"^(?:\t|    )[ \t]*")


def pasted_indent(head: bytes, whole: bool = False) -> bytes | None:
    """The whitespace every non-blank line of `head` starts with, when it is a pasted block's; None
    otherwise. Only the lines `head` holds whole are looked at, and at least MIN_LINES of them,
    unless `head` is the whole input (a one-line paste is indented like a longer one)."""
    lines = [line.rstrip(b"\r") for line in (head.split(b"\n") if whole else head.split(b"\n")[:-1]) if line.strip()]
    if not lines or (len(lines) < MIN_LINES and not whole):
        return None
    first = _INDENT.match(lines[0])
    if first is None:
        return None
    common = first.group()
    for line in lines[1:]:
        size = 0
        for mine, theirs in zip(common, line, strict=False):
            if mine != theirs:
                break
            size += 1
        common = common[:size]
        if _INDENT.match(common) is None:
            return None
    return common


class IndentStripper:
    """Takes `indent` off the start of every line that has it, a block at a time. A block that ends
    in the middle of what may be the indentation holds those bytes back for the next one."""

    def __init__(self, indent: bytes) -> None:
        self.indent = indent
        self._carry = b""
        self._line_start = True
        self.stripped = 0  # lines the indentation came off

    def strip(self, data: bytes, final: bool = False) -> bytes:
        data = self._carry + data
        self._carry = b""
        if not final:
            start = data.rfind(b"\n") + 1
            if (start or self._line_start) and len(data) - start < len(self.indent) and self.indent.startswith(data[start:]):
                self._carry = data[start:]
                data = data[:start]
        if not data:
            return data
        indent = self.indent
        out = data.replace(b"\n" + indent, b"\n")
        self.stripped += (len(data) - len(out)) // len(indent)
        if self._line_start and out.startswith(indent):
            out = out[len(indent) :]
            self.stripped += 1
        self._line_start = data.endswith(b"\n")
        return out
