"""Fuzz target for the scanner and normaliser (atheris). See docs/fuzzing.md."""

from __future__ import annotations

import io
import sys

import atheris

with atheris.instrument_imports():
    import rltriage
    from rltriage.pipeline.scan import scanner_for
    from rltriage.base.vocabulary import InputKind

SCANNER = scanner_for(rltriage.load_knowledge_base())
KINDS = list(InputKind)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    kind = KINDS[data[0] % len(KINDS)]
    result = SCANNER.scan("fuzz", kind, io.BytesIO(data[1:]))
    # Invariants: counts are positive and every tally has a first hit.
    for tally in result.tallies.values():
        assert tally.count >= 1 and tally.first is not None


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
