"""The `rltriage` command group; the commands themselves live beside it, one module per area."""

from __future__ import annotations

import click

from .._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rltriage")
def main() -> None:
    """Why an RL post-training run hung at step 0, ran out of memory or failed at start-up."""
