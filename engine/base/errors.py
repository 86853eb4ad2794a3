"""The one error type of the knowledge base: problems that each carry `path:line:col`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    path: str
    line: int
    col: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: error[{self.code}]: {self.message}"


class KnowledgeBaseError(Exception):
    """Raised when signatures, rules or templates are invalid; lists every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems))
        super().__init__("\n".join(str(p) for p in self.problems))


class InputError(Exception):
    """A path that does not exist or an invocation that cannot be served (exit code 2)."""


class InferenceError(Exception):
    """The rules could not reach a fixpoint within the firing budget."""
