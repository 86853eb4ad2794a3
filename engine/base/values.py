"""Values and their one set of coercions: typed named groups (sizes, durations, versions, counts),
loose numbers and versions for the rule language, config text, and plain Python from parsed YAML."""

from __future__ import annotations

import functools
import re
from typing import Any

from .vocabulary import ValueType

_SIZE = re.compile(r"^\s*([\d.,]+)\s*([KMGTP]?i?B|bytes?|[KMGTP])?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
          "p": 1024**5, "pb": 1000**5, "pib": 1024**5}
_DURATION = re.compile(r"^\s*([\d.,]+)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?\s*$", re.IGNORECASE)
_CLOCK = re.compile(r"^\s*(?:(\d+) days?, )?(\d+):(\d{2}):(\d{2}(?:\.\d+)?)\s*$")


def parse_size(text: str) -> int | None:
    match = _SIZE.match(text)
    if not match:
        return None
    try:
        number = float(match.group(1).replace(",", ""))
    except ValueError:
        return None
    unit = (match.group(2) or "").lower()
    return int(number * _UNITS.get(unit, 1))


def parse_duration(text: str) -> float | None:
    clock = _CLOCK.match(text)
    if clock:
        days = int(clock.group(1) or 0)
        return days * 86400 + int(clock.group(2)) * 3600 + int(clock.group(3)) * 60 + float(clock.group(4))
    match = _DURATION.match(text)
    if not match:
        return None
    number = float(match.group(1).replace(",", ""))
    unit = (match.group(2) or "s").lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return number / 1000
    if unit in ("m", "min", "mins", "minute", "minutes"):
        return number * 60
    if unit.startswith("h"):
        return number * 3600
    return number


def convert(text: str | None, kind: ValueType) -> Any:
    """Convert a captured group; a value that does not parse stays text rather than failing the hit."""
    if text is None:
        return None
    try:
        if kind is ValueType.int:
            return int(text.replace(",", "").strip())
        if kind is ValueType.float:
            return float(text.replace(",", "").strip())
        if kind is ValueType.size:
            size = parse_size(text)
            return size if size is not None else text
        if kind is ValueType.duration:
            duration = parse_duration(text)
            return duration if duration is not None else text
        if kind is ValueType.env:
            return env_pairs(text)
    except ValueError:
        return text
    return text.strip() if kind is ValueType.version else text


_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ENV_QUOTED = re.compile(r"""(?P<q>['"])(?P<name>""" + _ENV_NAME + r""")(?P=q)\s*:\s*(?:(?P<q2>['"])(?P<value>.*?)(?P=q2)|(?P<bare>[^,}\s]+))""")
_ENV_ASSIGN = re.compile(r"""(?:^|(?<=[\s;]))(?:export\s+)?(?P<name>[A-Z_][A-Z0-9_]*)=(?:(?P<q>['"])(?P<quoted>.*?)(?P=q)|(?P<value>\S*))""")
_ENV_SET_TO = re.compile(r"(?P<name>[A-Z_][A-Z0-9_]*) set (?:by environment )?to (?P<value>\S+)")


def env_pairs(text: str) -> dict[str, str]:
    """Environment variables written in a line: a printed dict (`environ({'A': 'x'})`,
    `'env_vars': {...}`), `A=x B=y` / `export A=x`, or NCCL's `A set by environment to x`."""
    pairs: dict[str, str] = {}
    if ":" in text and ("'" in text or '"' in text):
        for match in _ENV_QUOTED.finditer(text):
            value = match.group("value") if match.group("value") is not None else match.group("bare")
            pairs.setdefault(match.group("name"), value)
        if pairs:
            return pairs
    set_to = _ENV_SET_TO.search(text)
    if set_to:
        return {set_to.group("name"): set_to.group("value")}
    for assign in _ENV_ASSIGN.finditer(text):
        value = assign.group("quoted") if assign.group("quoted") is not None else assign.group("value")
        pairs.setdefault(assign.group("name"), value)
    return pairs


def human_size(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.2f} TiB"  # pragma: no cover


def number(value: Any) -> float | None:
    """A number in the rule language's loose sense: ints, floats and numeric text (commas allowed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        # Short texts are remembered: the rule language compares the same few (signature ids,
        # package names) over and over, and most are not numbers, which costs float() an exception
        # each time. Long ones (log lines) are seldom numbers and not worth keeping.
        return _short_text_number(value) if len(value) <= 80 else _text_number(value)
    return None


@functools.lru_cache(maxsize=4096)
def _short_text_number(text: str) -> float | None:
    return _text_number(text)


def _text_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def version_key(value: Any) -> tuple[int, ...]:
    match = re.search(r"\d+(?:\.\d+)*", str(value))
    if not match:
        return ()
    parts = tuple(int(p) for p in match.group(0).split("."))
    return parts + (0,) * (4 - len(parts)) if len(parts) < 4 else parts


# The words that stand for None, True and False. Text rendered by Jinja spells Python's own
# values (`None`, `True`; an empty render is None); config files and command lines spell YAML's
# and the shells' (`null`, `~`, any case).
RENDERED_WORDS: dict[str, Any] = {"None": None, "": None, "True": True, "true": True, "False": False, "false": False}
CONFIG_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None, "~": None}


def coerce_scalar(text: str, words: dict[str, Any] = RENDERED_WORDS, *, fold_case: bool = False) -> Any:
    """Text as the scalar it spells: one of `words`, an int, a float, or the text itself."""
    key = text.lower() if fold_case else text
    if key in words:
        return words[key]
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def coerce_config(value: Any) -> Any:
    """A config value written as text (`--key value`, `key=value`, a log echo) as its scalar; a
    bracketed list becomes its items joined by `, `. Values that are not text are kept."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            items = [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
            return ", ".join(items)
        return coerce_scalar(text.strip("'\""), CONFIG_WORDS, fold_case=True)
    return value


def plain(node: Any, *, text_fallback: bool = False) -> Any:
    """Parsed YAML (ruamel's round-trip containers and scalars) as plain Python values. Other
    objects (dates, …) are kept, or turned into their text with `text_fallback`."""
    if isinstance(node, dict):
        return {str(k): plain(v, text_fallback=text_fallback) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v, text_fallback=text_fallback) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return str(node) if text_fallback else node
