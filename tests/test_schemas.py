"""The shipped JSON Schemas stay in sync with the models, and the output validates against them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import rltriage
from rltriage.kb.fixtures import run_inputs
from rltriage.kb.models import Rule
from rltriage.pipeline.run import analyse
from rltriage.tools.schemas import SCHEMAS, schema_text

from .conftest import REPO, all_fixtures

SCHEMA_DIR = REPO / "schemas"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_shipped_schema_matches_the_model(name: str) -> None:
    shipped = (SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8")
    assert shipped == schema_text(name), f"schemas/{name}.schema.json is stale: run `rltriage schema {name} > schemas/{name}.schema.json`"


@pytest.mark.parametrize("folder", all_fixtures(), ids=[p.name for p in all_fixtures()])
def test_json_output_validates(folder: Path, kb: rltriage.KnowledgeBase) -> None:
    schema = json.loads((SCHEMA_DIR / "diagnosis.schema.json").read_text(encoding="utf-8"))
    document = json.loads(analyse(run_inputs(folder), kb=kb).diagnosis.model_dump_json())
    jsonschema.validate(document, schema)


def test_rule_files_validate_against_the_rule_schema(kb: rltriage.KnowledgeBase) -> None:
    from rltriage.base.values import plain
    from rltriage.kb.yamlio import load_yaml

    schema = json.loads((SCHEMA_DIR / "rule.schema.json").read_text(encoding="utf-8"))
    for loaded in kb.rules[:50]:
        tree, problems = load_yaml(loaded.origin.path, loaded.origin.display)
        assert not problems
        data = plain(tree)
        # Shorthands (`hit:`, `stage:`…) are expanded by the model before validation; the schema
        # describes the expanded form, so compare through the model.
        expanded = json.loads(Rule.model_validate(data).model_dump_json(by_alias=True, exclude_none=True))
        jsonschema.validate(expanded, schema)
