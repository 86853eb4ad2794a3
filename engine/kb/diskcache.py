"""The cache folder kept between processes (`~/.cache/rltriage`): where it is, and how an entry is
written. What goes in it is keyed by what it is built from, by each writer (see docs/security.md)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path | None:
    """Where compiled artefacts are kept between processes (None when caching is turned off)."""
    if os.environ.get("RLTRIAGE_NO_CACHE"):
        return None
    base = os.environ.get("RLTRIAGE_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rltriage")
    return Path(base)


def store(path: Path, data: bytes) -> None:
    """Write one entry whole or not at all: beside it, then renamed over it, so a process reading it
    at the same time finds the old entry, the new one or none. An unwritable cache only costs speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError:
        pass
