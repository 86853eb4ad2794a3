"""Config files (YAML, JSON, TOML) as flat `key → value` entries with the line each was written on.

A config is written by the failing job or by whoever packed the run, so its size and shape are
bounded here like everything else:

- small files (up to `FULL_PARSE`) get the round-trip YAML loader, which knows every key's line;
- larger JSON (up to `JSON_LIMIT`, an HF `trainer_state.json`) gets the standard library's C parser,
  and each key's line is found in the text; larger YAML is read line by line for its block-style
  `key: value` lines (what configs are made of), never held whole; larger TOML is not parsed;
- flattening stops at `MAX_DEPTH` levels, `MAX_NODES` values visited (YAML aliases are counted each
  time they are used, so an alias bomb stops early) and `MAX_KEYS` entries;
- a parser's RecursionError (a file nested thousands deep) is a warning like any parse error.

Each limit gives one warning naming it; what was read before it still counts.
"""

from __future__ import annotations

import bisect
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ..base.values import plain

FULL_PARSE = 128 << 10
JSON_LIMIT = 8 << 20
MAX_CONFIG_BYTES = 16 << 20
MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_KEYS = 2_000


@dataclass(frozen=True)
class Entry:
    key: str  # dotted path
    value: Any  # a scalar, or a tuple of scalars
    line: int  # 1-based; 0 when unknown
    text: str  # the line it was written on (or `key: value` when the line is unknown)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


class _Budget:
    def __init__(self, notes: list[str]) -> None:
        self.nodes = 0
        self.keys = 0
        self.notes = notes
        self.told: set[str] = set()

    def note(self, kind: str, message: str) -> None:
        if kind not in self.told:
            self.told.add(kind)
            self.notes.append(message)


def read_config(name: str, stream: BinaryIO, notes: list[str]) -> list[Entry]:
    """The entries of one config file; problems and limits go to `notes` as one-line warnings."""
    data = _read(stream, FULL_PARSE + 1)
    lowered = name.lower()
    if len(data) <= FULL_PARSE:
        return _small(lowered, data, notes)
    if lowered.endswith(".toml"):
        notes.append(f"config larger than {_size(FULL_PARSE)}: a TOML file that large is not parsed")
        return []
    if lowered.endswith(".json") or data.lstrip()[:1] in (b"{", b"["):
        data += _read(stream, JSON_LIMIT + 1 - len(data))
        if len(data) > JSON_LIMIT:
            notes.append(f"config larger than {_size(JSON_LIMIT)}: a JSON file that large is not parsed")
            return []
        return _large_json(data, notes)
    return _large_yaml(data, stream, notes)


def _read(stream: BinaryIO, size: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        block = stream.read(min(size, 1 << 20))
        if not block:
            break
        parts.append(block)
        size -= len(block)
    return b"".join(parts)


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deep to parse"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _small(name: str, data: bytes, notes: list[str]) -> list[Entry]:
    text = data.decode("utf-8", "replace")
    try:
        if name.endswith(".toml"):
            import tomllib

            tree: Any = tomllib.loads(text)
        else:
            tree = YAML(typ="rt").load(io.StringIO(text))
    except Exception as exc:  # noqa: BLE001 - a broken config is a warning; the logs still count
        try:
            tree = json.loads(text)
        except (ValueError, RecursionError):
            notes.append(f"config could not be parsed: {_first_line(exc)}")
            return []
    return flatten(tree, lambda _key, line: line, notes, text.splitlines())


def _large_json(data: bytes, notes: list[str]) -> list[Entry]:
    text = data.decode("utf-8", "replace")
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as exc:
        notes.append(f"config could not be parsed: {_first_line(exc)}")
        return []
    entries = flatten(tree, lambda _key, _line: 0, notes, [])
    return _JsonLines(text, {part for e in entries for part in e.key.split(".")}).place(entries)


class _JsonLines:
    """Where keys stand in JSON text: for a dotted key, the first line naming each part in turn.
    Only the names the entries use are looked for, in one pass of the C regex engine."""

    def __init__(self, text: str, names: set[str]) -> None:
        self._text = text
        self._at: dict[str, list[tuple[int, int]]] = {}  # name -> (line, offset) of each occurrence
        if not names:
            return
        alternation = "|".join(re.escape(json.dumps(n)[1:-1]) for n in sorted(names, key=len, reverse=True))
        line, counted = 1, 0
        for match in re.finditer(r'"(' + alternation + r')"\s*:', text):
            line += text.count("\n", counted, match.start())
            counted = match.start()
            self._at.setdefault(match.group(1), []).append((line, match.start()))

    def place(self, entries: list[Entry]) -> list[Entry]:
        placed = []
        for entry in entries:
            at: tuple[int, int] | None = (1, 0)
            for part in entry.key.split("."):
                found = self._at.get(json.dumps(part)[1:-1], [])
                index = bisect.bisect_left(found, at) if at is not None else len(found)
                at = found[index] if index < len(found) else None
            if at is None:
                placed.append(entry)
                continue
            start = self._text.rfind("\n", 0, at[1]) + 1
            stop = self._text.find("\n", at[1])
            placed.append(Entry(entry.key, entry.value, at[0], self._text[start : stop if stop >= 0 else len(self._text)][:4096]))
        return placed


def flatten(tree: Any, line_of: Any, notes: list[str], lines: list[str]) -> list[Entry]:
    """Mappings walked depth first, in the file's order and without recursion, into dotted keys;
    lists of scalars become tuples, lists holding mappings are skipped. Bounded by MAX_DEPTH,
    MAX_NODES and MAX_KEYS."""
    budget = _Budget(notes)
    out: list[Entry] = []
    if not isinstance(tree, dict):
        return out
    stack: list[tuple[str, Iterator[tuple[Any, Any]], Any]] = [("", iter(tree.items()), tree)]
    while stack:
        prefix, items, node = stack[-1]
        try:
            key, value = next(items)
        except StopIteration:
            stack.pop()
            continue
        budget.nodes += 1
        if budget.nodes > MAX_NODES:
            budget.note("nodes", f"config expands to more than {MAX_NODES} values (YAML aliases?); read the first {MAX_NODES}")
            break
        name = f"{prefix}.{key}" if prefix else str(key)
        line = 0
        if isinstance(node, CommentedMap):
            try:
                line = node.lc.key(key)[0] + 1
            except (KeyError, TypeError, AttributeError):
                line = 0
        if isinstance(value, dict):
            if len(stack) >= MAX_DEPTH:
                budget.note("depth", f"config nested more than {MAX_DEPTH} deep; deeper keys not read")
            else:
                stack.append((name, iter(value.items()), value))
            continue
        if isinstance(value, (list, CommentedSeq)):
            budget.nodes += len(value)
            if any(isinstance(v, (dict, list)) for v in value):
                continue
            entry_value: Any = tuple(plain(v, text_fallback=True) for v in value)
        else:
            entry_value = plain(value, text_fallback=True)
        budget.keys += 1
        if budget.keys > MAX_KEYS:
            budget.note("keys", f"config has more than {MAX_KEYS} keys; read the first {MAX_KEYS}")
            break
        number = line_of(name, line)
        text = lines[number - 1][:4096] if 0 < number <= len(lines) else f"{name}: {entry_value}"
        out.append(Entry(name, entry_value, number, text))
    return out


# --- large YAML, line by line -------------------------------------------------------------------

_KEY_LINE = re.compile(
    r"""^(?P<indent>[ ]*)(?P<dash>-[ ]+)?(?P<key>"[^"]{1,256}"|'[^']{1,256}'|[A-Za-z0-9_$][^:#]{0,255}?)[ \t]*:(?:[ \t]+(?P<value>.*?))?[ \t]*$"""
)
_ITEM_LINE = re.compile(r"^(?P<indent>[ ]*)-(?:[ \t]+(?P<value>.*?))?[ \t]*$")
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_HEX = re.compile(r"^0x[0-9a-fA-F_]+$")
_OCT = re.compile(r"^0o[0-7_]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?$")
_SPECIAL = {"~": None, "null": None, "Null": None, "NULL": None, "true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False,
            ".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan"), ".Inf": float("inf"), ".NaN": float("nan")}


def scalar(text: str) -> Any:
    """A plain YAML 1.2 scalar as the round-trip loader would give it (dates stay text)."""
    text = text.strip()
    if not text:
        return None
    if text[0] in "\"'" and len(text) >= 2 and text[-1] == text[0]:
        return text[1:-1]
    if text in _SPECIAL:
        return _SPECIAL[text]
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _HEX.match(text):
        return int(text[2:].replace("_", ""), 16)
    if _OCT.match(text):
        return int(text[2:].replace("_", ""), 8)
    if _FLOAT.match(text) and any(c.isdigit() for c in text):
        return float(text.replace("_", ""))
    return text


def _strip_comment(value: str) -> str:
    if value and value[0] in "\"'":
        end = value.find(value[0], 1)
        return value[: end + 1] if end > 0 else value
    at = value.find(" #")
    return value[:at].rstrip() if at >= 0 else value


def _flow_list(value: str) -> tuple[Any, ...] | None:
    inner = value[1:-1].strip()
    if not inner:
        return ()
    if any(c in inner for c in "[]{}"):
        return None
    return tuple(scalar(part) for part in inner.split(","))


def _lines(data: bytes, stream: BinaryIO, budget: _Budget) -> Iterator[tuple[int, str]]:
    pending = data
    total = len(data)
    number = 0
    while True:
        block = stream.read(1 << 20)
        if block:
            total += len(block)
            if total > MAX_CONFIG_BYTES:
                budget.note("size", f"config larger than {_size(MAX_CONFIG_BYTES)}; read its first {_size(MAX_CONFIG_BYTES)}")
                block = b""
        pieces = (pending + block).split(b"\n")
        pending = pieces.pop() if block else b""
        for raw in pieces:
            number += 1
            yield number, raw[:4096].decode("utf-8", "replace").rstrip("\r")
        if not block:
            return


def _large_yaml(data: bytes, stream: BinaryIO, notes: list[str]) -> list[Entry]:
    """Block-style `key: value` lines of a YAML file too large for the round-trip loader: nested
    keys by indentation, block and flow lists of scalars; flow mappings, multi-line scalars, lists
    of mappings and aliases are skipped (an alias is never expanded)."""
    budget = _Budget(notes)
    out: list[Entry] = []
    parents: list[tuple[int, str]] = []  # (indent, dotted key) of the open mappings
    items: tuple[int, str, int, list[Any], str] | None = None  # (indent, key, line, items, its text) of a list being read
    skip_deeper: int | None = None  # inside a multi-line scalar: lines indented more than this
    skip_items: int | None = None  # inside a list of mappings: its `-` lines at this indent, and deeper lines

    def emit(key: str, value: Any, line: int, text: str) -> bool:
        budget.keys += 1
        if budget.keys > MAX_KEYS:
            budget.note("keys", f"config has more than {MAX_KEYS} keys; read the first {MAX_KEYS}")
            return False
        out.append(Entry(key, value, line, text))
        return True

    for number, line in _lines(data, stream, budget):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if skip_deeper is not None:
            if indent > skip_deeper:
                continue
            skip_deeper = None
        if skip_items is not None:
            if indent > skip_items or (indent == skip_items and stripped.startswith("-")):
                continue
            skip_items = None
        item = _ITEM_LINE.match(line)
        if items is not None:
            if item and indent >= items[0]:
                value = _strip_comment(item.group("value") or "")
                if not value or value[:1] in "[{&*|>!" or _KEY_LINE.match(value):
                    items = None
                    skip_items = indent  # a list of mappings (or of lists): skipped whole
                else:
                    items[3].append(scalar(value))
                continue
            if items[3] and not emit(items[1], tuple(items[3]), items[2], items[4]):
                return out
            items = None
        match = _KEY_LINE.match(line)
        if match is None or match.group("dash"):
            if item:
                skip_items = indent  # an item that belongs to no list we read
            continue
        while parents and parents[-1][0] >= indent:
            parents.pop()
        if len(parents) >= MAX_DEPTH:
            budget.note("depth", f"config nested more than {MAX_DEPTH} deep; deeper keys not read")
            skip_deeper = indent
            continue
        key = match.group("key").strip()
        if key[:1] in "\"'":
            key = key[1:-1]
        name = f"{parents[-1][1]}.{key}" if parents else key
        value = _strip_comment(match.group("value") or "")
        budget.nodes += 1
        if budget.nodes > MAX_NODES:
            budget.note("nodes", f"config expands to more than {MAX_NODES} values (YAML aliases?); read the first {MAX_NODES}")
            return out
        if value.startswith("&"):
            value = value.split(None, 1)[1] if " " in value else ""
        if not value:
            parents.append((indent, name))
            items = (indent, name, number, [], line)
            continue
        if value[:1] in "|>":
            skip_deeper = indent
            continue
        if value[:1] in "*{!":
            continue
        if value[:1] == "[":
            flow = _flow_list(value) if value.endswith("]") else None
            if flow is not None and not emit(name, flow, number, line):
                return out
            continue
        if not emit(name, scalar(value), number, line):
            return out
    if items is not None and items[3]:
        emit(items[1], tuple(items[3]), items[2], items[4])
    return out
