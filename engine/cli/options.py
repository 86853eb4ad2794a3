"""Options several commands share, defined once."""

from __future__ import annotations

import os
from typing import Any

import click
from click.core import ParameterSource

from ..infer.registry import ENGINES
from ..pipeline.render import FORMATS

FORMAT = click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="text", show_default=True)
RULES_DIRS = click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
ENGINE = click.option("--engine", type=click.Choice(list(ENGINES)), default="default", show_default=True)
# A plain path: what it may be (a folder, a missing folder, an input …) is checked by `check_output`,
# which says so in one line.
OUTPUT = click.option("-o", "--output", type=click.Path(), help="Write the report to this file.")
NO_REDACT = click.option("--no-redact", is_flag=True, help="Keep tokens, keys and passwords in the output.")


# `-o report.html` without --format writes html: the suffixes that name a format.
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


def output_format(fmt: str, output: str | None) -> str:
    """--format as given; left at its default, the format -o's suffix names."""
    context = click.get_current_context(silent=True)
    if output and context is not None and context.get_parameter_source("fmt") in (ParameterSource.DEFAULT, None):
        return SUFFIX_FORMATS.get(os.path.splitext(output)[1].lower(), fmt)
    return fmt


def jobs(help_text: str) -> Any:
    """`-j/--jobs`; what the workers do differs between commands."""
    return click.option("-j", "--jobs", type=click.IntRange(1, 256), default=1, show_default=True, help=help_text)
