"""Secrets out of every output: reports get pasted into public issues.

Redaction runs on the finished result (evidence text, extracted values, rendered fixes and patch
plans alike), so no output format can bypass it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

MASK = "[REDACTED]"

_Sub = Callable[[re.Match[str]], str]


def _keep(group: int) -> _Sub:
    """Replace the whole match by group `group` (the non-secret part) followed by the mask."""
    return lambda m: (m.group(group) or "") + MASK


# Each entry: (pattern, replacement). Order matters: specific token shapes first, then contexts.
_RULES: list[tuple[re.Pattern[str], str | _Sub]] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S), "-----BEGIN PRIVATE KEY-----" + MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), MASK),
    (re.compile(r"\bya29\.[0-9A-Za-z_\-]{20,}"), MASK),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), MASK),
    (re.compile(r"(?i)(AccountKey=)[A-Za-z0-9+/=]{20,}"), _keep(1)),
    (re.compile(r"(?i)([?&;]sig=)[A-Za-z0-9%+/=]{10,}"), _keep(1)),
    (re.compile(r"(?i)(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)[^\s\"',;]+"), _keep(1)),
    (re.compile(r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/\-]{16,}=*"), _keep(1)),
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^@\s/]+(@)"), lambda m: m.group(1) + MASK + m.group(2)),
    (re.compile(r"(?i)(\bwandb\b[^\n]{0,60}?\b)([0-9a-f]{40})\b"), _keep(1)),
    (re.compile(r"(?i)(\blocal-)[0-9a-f]{40}\b"), _keep(1)),
    # Values of environment variables, config keys and options whose names say what they hold: the
    # word must be a whole part of the name (HF_TOKEN, api-key), so `max_tokens` or
    # TOKENIZERS_PARALLELISM keep their values.
    (
        re.compile(
            r"(?i)((?<![\w.-])[\"']?(?:[a-z0-9]+[_.-])*(?:api[_-]?key|access[_-]?key|secret|token|password|passwd|credentials?|private[_-]?key)"
            r"(?:[_.-][a-z0-9]+)*[\"']?\s*[=:]\s*[\"']?)(?!\[REDACTED\])[^\s\"',;}]+"
        ),
        _keep(1),
    ),
    (
        re.compile(
            r"(?i)((?<![\w-])--?(?:[a-z0-9]+[_-])*(?:api[_-]?key|token|secret|password)(?:[_-][a-z0-9]+)*[ =])(?!\[REDACTED\])(?!-)\S+"
        ),
        _keep(1),
    ),
]


def redact(text: str) -> str:
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)  # type: ignore[arg-type]
    return text


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v) for k, v in value.items()}
    return value


Model = TypeVar("Model", bound=BaseModel)


def redact_model(model: Model) -> Model:
    """A copy of a result model with every string redacted.

    Long lists of models (a diagnosis's inputs, one per file) are redacted item by item, and an item
    redaction leaves unchanged is kept as it is: a folder of 100,000 files is not copied three times.
    """
    lists = {
        name: value
        for name, value in model
        if isinstance(value, list) and len(value) > _ITEMWISE and all(isinstance(item, BaseModel) for item in value)
    }
    data = _walk(model.model_dump(mode="json", exclude=set(lists)))
    for name, items in lists.items():
        data[name] = [_redact_item(item) for item in items]
    return type(model).model_validate(data)


_ITEMWISE = 64


def _redact_item(item: BaseModel) -> Any:
    dumped = item.model_dump(mode="json")
    walked = _walk(dumped)
    return item if walked == dumped else walked
