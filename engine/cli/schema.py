"""`schema`: the JSON Schemas of the output and of the knowledge-base files."""

from __future__ import annotations

import click

from ..tools.schemas import SCHEMAS, schema_text


@click.command("schema")
@click.argument("name", type=click.Choice(list(SCHEMAS)), default="diagnosis")
def schema_command(name: str) -> None:
    """Print a JSON Schema: the diagnosis output, or a knowledge-base file type for editors."""
    click.echo(schema_text(name), nl=False)
