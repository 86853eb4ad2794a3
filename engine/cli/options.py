"""Options several commands share, defined once."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ..infer.registry import ENGINES
from ..kb.load import describe_packs
from ..pipeline.render import FORMATS

FORMAT = click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="text", show_default=True)
RULES_DIRS = click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(file_okay=False), help="Extra rule pack (repeatable).")
ENGINE = click.option("--engine", type=click.Choice(list(ENGINES)), default="default", show_default=True)
# A plain path: what it may be (a folder, a missing folder, an input …) is checked by `check_output`,
# which says so in one line.
OUTPUT = click.option("-o", "--output", type=click.Path(), help="Write the report to this file.")
NO_REDACT = click.option("--no-redact", is_flag=True, help="Keep tokens, keys and passwords in the output.")
COLOR = click.option(
    "--color", "--colour", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
    help="Colour the text report. auto: on a terminal, unless NO_COLOR is set; FORCE_COLOR forces it on.",
)
VERBOSE = click.option("-v", "--verbose", is_flag=True, help="Say on stderr which knowledge base (folders) the command read.")


def colour_wanted(choice: str, output: str | None) -> bool:
    """--color, then NO_COLOR (https://no-color.org), then FORCE_COLOR, then: stdout is a terminal."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0", "false"):
        return output is None
    return output is None and sys.stdout.isatty()


def say_knowledge_base(packs: Iterable[Path], verbose: bool) -> None:
    """With --verbose: `rltriage: knowledge base: PATH (checkout|installed|pack)` on stderr."""
    if verbose:
        click.echo(f"rltriage: knowledge base: {describe_packs(packs)}", err=True)


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
