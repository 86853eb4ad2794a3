"""JSON Schemas generated from the models: the diagnosis output and each knowledge-base file type."""

from __future__ import annotations

import json

from pydantic import BaseModel

from ..base.contract import Diagnosis, RunDiff
from ..kb.models import CatalogItem, FixtureExpectation, Rule, Signature

SCHEMAS: dict[str, type[BaseModel]] = {
    "diagnosis": Diagnosis,
    "signature": Signature,
    "rule": Rule,
    "fixture": FixtureExpectation,
    "diff": RunDiff,
    "collect": CatalogItem,
}


def schema_text(name: str) -> str:
    model = SCHEMAS[name]
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://rltriage.invalid/schemas/{name}.schema.json"
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
