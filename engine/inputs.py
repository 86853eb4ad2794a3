"""Finding the inputs of a run and telling what each one is."""

from __future__ import annotations

import io
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from .errors import InputError
from .vocabulary import InputKind

SNIFF_BYTES = 8192
MAX_PARSED_FILE = 16 * 1024 * 1024  # configs and environment reports are read whole

_PIP_LINE = re.compile(rb"^[A-Za-z0-9][A-Za-z0-9_.\-]*(?:\[[^\]]*\])?\s*(?:==|===|@)\s*\S+\s*$")
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_\-.]?\d+", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    """One input: a display name for citations and a way to open its bytes."""

    display: str
    open: Callable[[], BinaryIO]
    name: str


@dataclass(frozen=True)
class Warning:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def sort_key(source: Source) -> tuple[str, ...]:
    """Inputs are read in this order, whatever order they were given in, so output is deterministic."""
    return (source.display,)


def _walk(root: Path, warnings: list[Warning]) -> list[Path]:
    found: list[Path] = []

    def on_error(exc: OSError) -> None:
        warnings.append(Warning(str(exc.filename or root), f"cannot read folder: {exc.strerror or exc}"))

    for folder, dirs, files in os.walk(root, onerror=on_error, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            found.append(Path(folder) / name)
        for name in dirs:
            link = Path(folder) / name
            if link.is_symlink():
                warnings.append(Warning(str(link), "symbolic link to a folder not followed"))
    return found


def discover(paths: Iterable[str], warnings: list[Warning], stdin: BinaryIO | None = None) -> list[Source]:
    """Expand files, folders and `-` into sources, in a deterministic order.

    A path that does not exist is an InputError; anything unreadable is a warning.
    """
    sources: list[Source] = []
    seen: set[str] = set()
    for given in paths:
        if given == "-":
            data = (stdin or sys.stdin.buffer).read()
            sources.append(Source("<stdin>", lambda data=data: io.BytesIO(data), "stdin"))
            continue
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            raise InputError(f"{given}: no such file or folder")
        candidates = _walk(path, warnings) if path.is_dir() else [path]
        if path.is_dir() and not candidates:
            warnings.append(Warning(given, "folder holds no files"))
        for candidate in candidates:
            display = str(candidate)
            if display in seen:
                continue
            seen.add(display)
            source = _file_source(candidate, warnings)
            if source is not None:
                sources.append(source)
    return sources


def _file_source(path: Path, warnings: list[Warning]) -> Source | None:
    display = str(path)
    try:
        info = path.stat()
    except OSError as exc:
        reason = "broken symbolic link" if path.is_symlink() else (exc.strerror or str(exc))
        warnings.append(Warning(display, f"skipped: {reason}"))
        return None
    if not stat.S_ISREG(info.st_mode):
        warnings.append(Warning(display, "skipped: not a regular file"))
        return None
    if not os.access(path, os.R_OK):
        warnings.append(Warning(display, "skipped: permission denied"))
        return None
    return Source(display, lambda path=path: open(path, "rb"), path.name)


def classify(source: Source, head: bytes) -> InputKind:
    """The kind of an input, from its name first and its first bytes second."""
    name = source.name.lower()
    suffix = Path(name).suffix
    text = head.decode("utf-8", "replace")
    if "most recent call first)" in text and ("Thread 0x" in text or "Stack (most recent" in text) or (
        re.search(r"^Process \d+: ", text, re.M) and "Python v" in text
    ):
        return InputKind.stack_dump
    if "collect_env" in name or "Collecting environment information" in text or re.search(r"^PyTorch version: ", text, re.M):
        return InputKind.env_report
    lines = [line for line in head.splitlines()[:50] if line.strip() and not line.startswith(b"#")]
    if lines and sum(1 for line in lines if _PIP_LINE.match(line)) >= max(2, int(len(lines) * 0.6)):
        return InputKind.env_report
    if suffix in (".yaml", ".yml", ".json", ".toml") and not re.search(r"^\S*(?:INFO|WARNING|ERROR)\b", text, re.M):
        return InputKind.config
    if suffix == ".err" and "worker" in name:
        return InputKind.ray_worker_err
    if suffix == ".out" and "worker" in name:
        return InputKind.ray_worker_out
    if _RANK_NAME.search(name):
        return InputKind.rank_log
    if suffix in (".log", ".txt", ".out", ".err", "") or name == "stdin":
        return InputKind.driver_log
    return InputKind.other


def looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    if not head:
        return False
    control = sum(1 for b in head if b < 9 or 13 < b < 32 and b != 27)
    return control > len(head) * 0.1
