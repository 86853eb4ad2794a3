"""`verify`: a rerun's logs against the success criteria."""

from __future__ import annotations

import sys

import click

from ..tools.verify import format_text, verify
from .common import EXIT_FOUND, EXIT_OK, report_errors
from .options import NO_REDACT, RULES_DIRS


@click.command("verify")
@click.argument("paths", nargs=-1, required=True)
@RULES_DIRS
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@NO_REDACT
def verify_command(paths: tuple[str, ...], rules_dirs: tuple[str, ...], fmt: str, no_redact: bool) -> None:
    """Check a rerun's logs against the success criteria: first step, progress, step time, reward.

    Exit 0 when all hold, 1 when one fails, 2 for a bad invocation or missing path, 3 for a
    knowledge-base error.
    """

    def action() -> int:
        stdin = sys.stdin.buffer if "-" in paths else None
        result = verify(list(paths), rules_dirs=rules_dirs, stdin=stdin, redacting=not no_redact)
        for warning in result.warnings:
            click.echo(f"rltriage: warning: {warning}", err=True)
        click.echo(result.model_dump_json(indent=2) if fmt == "json" else format_text(result), nl=fmt == "json")
        return EXIT_OK if result.passed else EXIT_FOUND

    sys.exit(report_errors(action))
