"""`verify`: a rerun's logs against the success criteria."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click
from pydantic import ValidationError

from ..base.contract import Diagnosis
from ..base.errors import InputError
from ..pipeline.run import analyse
from ..tools.verify import format_text, verify
from .common import EXIT_FOUND, EXIT_OK, report_errors
from .options import NO_REDACT, RULES_DIRS


def _earlier(against: str, rules_dirs: Sequence[str]) -> Diagnosis:
    """The earlier diagnosis: a `diagnose --format json` file, or the earlier run itself, diagnosed now."""
    path = Path(against)
    if not path.exists():
        raise InputError(f"{against}: no such file or directory")
    if path.is_file() and path.suffix.lower() == ".json":
        try:
            return Diagnosis.model_validate_json(path.read_bytes())
        except (ValidationError, ValueError) as exc:
            first = str(exc).splitlines()[0]
            raise InputError(f"{against}: not a diagnosis written by `rltriage diagnose --format json` ({first})") from None
    return analyse([against], rules_dirs=rules_dirs).diagnosis


@click.command("verify")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--against", "against", default=None, metavar="DIAGNOSIS.json|EARLIER_RUN",
    help="The earlier run's diagnosis (JSON) or the earlier run itself: its first-ranked cause must be gone.",
)
@RULES_DIRS
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@NO_REDACT
def verify_command(paths: tuple[str, ...], against: str | None, rules_dirs: tuple[str, ...], fmt: str, no_redact: bool) -> None:
    """Check a rerun's logs against the success criteria: first step, progress, step time, reward,
    and no failure (uncaught exception, fatal signal, crash or out-of-memory); with --against, that
    the cause diagnosed before is gone.

    Exit 0 when all hold, 1 when one fails (the line names where), 2 for a bad invocation or missing
    path, 3 for a knowledge-base error.
    """

    def action() -> int:
        earlier = _earlier(against, rules_dirs) if against else None
        stdin = sys.stdin.buffer if "-" in paths else None
        result = verify(list(paths), rules_dirs=rules_dirs, stdin=stdin, against=earlier, redacting=not no_redact)
        for warning in result.warnings:
            click.echo(f"rltriage: warning: {warning}", err=True)
        click.echo(result.model_dump_json(indent=2) if fmt == "json" else format_text(result), nl=fmt == "json")
        return EXIT_OK if result.passed else EXIT_FOUND

    sys.exit(report_errors(action))
