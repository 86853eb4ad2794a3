"""Fuzz target for the knowledge-base loader (atheris): any rule file is loaded or rejected with
problems that carry path:line:col, never an unhandled exception. See docs/fuzzing.md."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import rltriage
    from rltriage import KnowledgeBaseError

PACK = Path(tempfile.mkdtemp(prefix="rltriage-fuzz-"))
(PACK / "rules" / "fz").mkdir(parents=True)
(PACK / "signatures" / "fz").mkdir(parents=True)


def test_one_input(data: bytes) -> None:
    kind = "rules" if data[:1] != b"s" else "signatures"
    target = PACK / kind / "fz" / "x.yaml"
    target.write_bytes(data[1:])
    try:
        rltriage.load_knowledge_base([PACK], include_builtin=False)
    except KnowledgeBaseError as exc:
        assert exc.problems and all(p.line >= 1 and p.col >= 1 for p in exc.problems)
    finally:
        target.unlink()


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
