"""The `rltriage` command group; the commands themselves live beside it, one module per area."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .._version import __version__

# What a shell reports for a process killed by SIGPIPE: the reader of our output went away.
EXIT_BROKEN_PIPE = 141


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # `rltriage batch … | head`: the reader closed the pipe. Say so once, on stderr, and stop
            # without a traceback; stdout is pointed at /dev/null so that the final flush is silent.
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            try:
                click.echo("rltriage: output closed early (broken pipe); stopped", err=True)
            except OSError:
                pass
            sys.exit(EXIT_BROKEN_PIPE)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rltriage")
def main() -> None:
    """Why an RL post-training run hung at step 0, ran out of memory or failed at start-up."""
