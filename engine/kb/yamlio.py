"""YAML reading with positions, so every validation error can name `path:line:col`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from ..base.errors import Problem


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


MAX_FILE = 1 << 20  # bytes of one knowledge-base file
MAX_NODES = 100_000  # values a file expands to, each use of an alias counted again
MAX_DEPTH = 64


def load_yaml(path: Path, display: str) -> tuple[Any, list[Problem]]:
    """Parse one YAML file; returns the round-trip tree (with positions) or the problems. A file
    larger than MAX_FILE, nested deeper than MAX_DEPTH or expanding to more than MAX_NODES values
    (an alias bomb) is a problem, found before anything walks the tree."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            return None, [Problem(display, 1, 1, "too-large", f"file is larger than {MAX_FILE >> 20} MiB")]
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(display, 1, 1, "unreadable", f"cannot read file: {exc}")]
    try:
        tree = _yaml().load(text)
    except RecursionError:
        return None, [Problem(display, 1, 1, "yaml", f"nested more than {MAX_DEPTH} deep")]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        message = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        return None, [Problem(display, line, col, "yaml", message or "invalid YAML")]
    except YAMLError as exc:
        return None, [Problem(display, 1, 1, "yaml", str(exc).splitlines()[0])]
    problem = _expansion_problem(tree)
    if problem is not None:
        line, col = problem[0]
        return None, [Problem(display, line, col, "yaml", problem[1])]
    return tree, []


def _expansion_problem(tree: Any) -> tuple[tuple[int, int], str] | None:
    """Walk the tree as `plain` would, without recursion, counting every value (an alias as often as
    it is used): ((line, col), message) when it is an alias bomb (at the top-level value that
    expands too far, not the anchor it repeats) or nested too deep (at the deepest node)."""
    nodes = 0
    stack: list[tuple[Any, int, tuple[int, int] | None]] = [(tree, 0, None)]
    while stack:
        node, depth, top = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        nodes += len(children)
        where = (node.lc.line + 1, node.lc.col + 1) if isinstance(node, (CommentedMap, CommentedSeq)) else (1, 1)
        if nodes > MAX_NODES:
            return top or where, f"the file expands to more than {MAX_NODES} values (an alias used inside an alias, over and over?)"
        if depth >= MAX_DEPTH:
            return where, f"nested more than {MAX_DEPTH} deep"
        for key, child in children:
            origin = top
            if origin is None:
                origin = where
                if isinstance(node, CommentedMap):
                    try:
                        line, col = node.lc.value(key)
                        origin = (line + 1, col + 1)
                    except (KeyError, TypeError):
                        pass
            stack.append((child, depth + 1, origin))
    return None


def position(tree: Any, loc: tuple[Any, ...]) -> tuple[int, int]:
    """The 1-based line/column of the deepest node of `loc` that exists in the tree."""
    line, col = 1, 1
    if isinstance(tree, (CommentedMap, CommentedSeq)):
        line, col = tree.lc.line + 1, tree.lc.col + 1
    node = tree
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, CommentedMap) and part in node:
            key_line, key_col = node.lc.key(part)
            if last:
                return key_line + 1, key_col + 1
            value_pos = node.lc.value(part)
            line, col = (value_pos[0] + 1, value_pos[1] + 1) if value_pos else (key_line + 1, key_col + 1)
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            item_line, item_col = node.lc.item(part)
            line, col = item_line + 1, item_col + 1
            node = node[part]
        else:
            break
    return line, col


def validation_problems(exc: ValidationError, tree: Any, display: str) -> list[Problem]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        line, col = position(tree, loc)
        where = ".".join(str(p) for p in loc)
        kind = error["type"]
        code = {
            "extra_forbidden": "unknown-key",
            "missing": "missing-key",
            "enum": "bad-enum",
            "literal_error": "bad-enum",
            "string_pattern_mismatch": "bad-format",
        }.get(kind, "schema")
        message = error["msg"]
        if kind == "extra_forbidden":
            message = f"unknown key '{loc[-1]}'"
        elif kind == "missing":
            message = f"missing key '{loc[-1]}'"
        problems.append(Problem(display, line, col, code, f"{where}: {message}" if where else message))
    return problems
