"""`smoke`: a config rewritten into the 1-step smoke test, shown as a diff."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import click

from ..base.errors import InputError
from ..tools.smoke import smoke, smoke_text
from .common import EXIT_OK, EXIT_USAGE, check_output, report_errors, write_report


def _guarded(action: Callable[[], int]) -> int:
    def writing() -> int:
        try:
            return action()
        except OSError as exc:
            click.echo(f"rltriage: cannot write: {exc}", err=True)
            return EXIT_USAGE

    return report_errors(writing)


@click.command("smoke", context_settings={"ignore_unknown_options": True})
@click.argument("config")
@click.option("-o", "--output", type=click.Path(), help="Write the reduced config here (atomic). Without it nothing is written.")
def smoke_command(config: str, output: str | None) -> None:
    """Reduce CONFIG to the 1-step smoke test and print the change as a unified diff.

    CONFIG is a TRL YAML/JSON config, a launch script or argument file with `--flag value` /
    `a.b=value` arguments (rewritten in place), or a verl / disaggregated-trainer YAML. A string of
    arguments (`"--num_generations 8 …"`) works too. Only arguments on launch-command lines are
    rewritten (never flags in comments, prose or code). Anything else — Python source, Markdown, a
    YAML or script without an RL training setting — is refused in one line and nothing is written.
    Exit 0 on success, 2 for an unreadable or unrecognised config.
    """

    def action() -> int:
        if output:
            check_output(output, [config])
        if not os.path.exists(config) and config.lstrip().startswith("--"):
            result = smoke_text(config + "\n", name="<arguments>", kind="args", output_name=output)
        elif not os.path.isfile(config):
            raise InputError(f"{config}: no such file")
        else:
            result = smoke(config, output_name=output)
        if result.diff:
            click.echo(result.diff, nl=False)
        else:
            click.echo("rltriage: the config is already reduced to the smoke test; nothing to change", err=True)
        for change in result.changes:
            old = "(added)" if change.added else json.dumps(change.old)
            click.echo(f"rltriage: {change.key}: {old} -> {json.dumps(change.new)} — {change.reason}", err=True)
        for note in result.notes:
            click.echo(f"rltriage: to do: {note}", err=True)
        if output:
            write_report(result.text, output, [config])
            click.echo(f"rltriage: wrote {output}", err=True)
        return EXIT_OK

    sys.exit(_guarded(action))
