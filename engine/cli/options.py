"""Options several commands share, defined once."""

from __future__ import annotations

from typing import Any

import click

from ..infer.registry import ENGINES
from ..pipeline.render import FORMATS

FORMAT = click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="text", show_default=True)
RULES_DIRS = click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
ENGINE = click.option("--engine", type=click.Choice(list(ENGINES)), default="default", show_default=True)
OUTPUT = click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report to this file.")
NO_REDACT = click.option("--no-redact", is_flag=True, help="Keep tokens, keys and passwords in the output.")


def jobs(help_text: str) -> Any:
    """`-j/--jobs`; what the workers do differs between commands."""
    return click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True, help=help_text)
