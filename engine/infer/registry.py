"""The engine registry: engines by name. The durable engine is imported only when asked for,
because durable-rules is an optional dependency."""

from __future__ import annotations

from .default import DefaultEngine
from .results import Engine

ENGINES: tuple[str, ...] = ("default", "durable")


def get_engine(name: str) -> Engine:
    if name == "default":
        return DefaultEngine()
    if name == "durable":
        from .durable import DurableEngine  # optional dependency: imported on demand

        return DurableEngine()
    raise ValueError(f"unknown engine '{name}' (choose default or durable)")
