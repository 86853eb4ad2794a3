"""Stage 3 — facts: typed facts from the scan, from config files and from environment reports."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from .infer import BaseFact, stage_definitions
from .result import Evidence
from .scan import ByteStream, FileScan, Tally
from .vocabulary import LOG_KINDS

# Keys the report and the smoke-test reduction quote even when no rule matches on them.
WELL_KNOWN_CONFIG_KEYS = (
    "num_generations",
    "max_completion_length",
    "max_prompt_length",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "steps_per_generation",
    "num_processes",
    "max_steps",
    "num_train_epochs",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "gpu_memory_utilization",
    "max_model_len",
    "max_tokens",
    "reward_funcs",
    "eval_strategy",
    "model_name_or_path",
    "model",
    "tensor_parallel_size",
    "micro_batch_per_replica",
    "batch_per_replica",
    "group_size",
    "n",
)

_PIP = re.compile(r"^(?:\[(?:pip\d?|conda)\]\s+)?(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])?\s*(?:===?|\s+)\s*(?P<version>\d[\w.+\-!]*)\s*(?:\S+\s*)*$")
_TORCH = re.compile(r"^PyTorch version:\s*(?P<version>\S+)")
_PLATFORM = re.compile(r"^Python platform:\s*Linux-(?P<kernel>\d+\.\d+[\w.\-]*?)-(?:x86_64|aarch64|ppc64le)")
_UNAME = re.compile(r"^Linux \S+ (?P<kernel>\d+\.\d+\.\d+[\w.\-]*) #")
_KERNEL = re.compile(r"^(?:Kernel(?: version)?|uname -r)\s*[:=]\s*(?P<kernel>\d+\.\d+\.\d+[\w.\-]*)", re.IGNORECASE)


def coerce_config(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            items = [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
            return ", ".join(items)
        text = text.strip("'\"")
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered in ("none", "null", "~"):
            return None
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                pass
        return text
    return value


def hit_facts(scan: FileScan) -> list[BaseFact]:
    facts = []
    for key in sorted(scan.tallies):
        tally = scan.tallies[key]
        sig_id = tally.signature
        assert tally.first is not None
        fields: dict[str, Any] = dict(tally.first.values)
        if tally.last is not None and tally.last is not tally.first:
            fields.update({f"last_{name}": value for name, value in tally.last.values.items()})
        else:
            fields.update({f"last_{name}": value for name, value in tally.first.values.items()})
        fields.update(
            signature=sig_id,
            path=scan.path,
            kind=scan.kind.value,
            count=tally.count,
            line=tally.first.line,
            text=tally.first.text,
            rank=tally.first.rank,
            ranks=len(tally.ranks),
            timestamp=tally.first.timestamp,
        )
        facts.append(BaseFact("hit", fields, tally_evidence(scan.path, tally)))
    return facts


def tally_evidence(path: str, tally: Tally) -> tuple[Evidence, ...]:
    records = [tally.first, *tally.samples, tally.last]
    seen: set[int] = set()
    out = []
    for record in records:
        if record is None or record.line in seen:
            continue
        seen.add(record.line)
        out.append(Evidence(path=path, line=record.line, text=record.text, signature=tally.signature))
    return tuple(out)


def echo_facts(scan: FileScan) -> list[BaseFact]:
    facts = []
    seen: set[tuple[str, str]] = set()
    for echo in scan.config:
        if (echo.key, echo.value) in seen:
            continue
        seen.add((echo.key, echo.value))
        evidence = (Evidence(path=scan.path, line=echo.line, text=echo.text, signature=f"config:{echo.key}"),)
        fields = {"key": echo.key, "name": echo.key.rsplit(".", 1)[-1], "value": coerce_config(echo.value), "path": scan.path, "line": echo.line, "source": "log"}
        facts.append(BaseFact("config", fields, evidence))
    return facts


def _flatten(node: Any, prefix: str, out: list[tuple[str, Any, int]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            line = 0
            if isinstance(node, CommentedMap):
                try:
                    line = node.lc.key(key)[0] + 1
                except (KeyError, TypeError):
                    line = 0
            if isinstance(value, dict):
                _flatten(value, name, out)
            elif isinstance(value, (list, CommentedSeq)):
                scalars = [v for v in value if not isinstance(v, (dict, list))]
                if len(scalars) == len(value):
                    out.append((name, tuple(_plain_scalar(v) for v in value), line))
            else:
                out.append((name, _plain_scalar(value), line))


def _plain_scalar(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def config_file_facts(display: str, data: bytes, warnings: list[str]) -> list[BaseFact]:
    text = data.decode("utf-8", "replace")
    try:
        if display.endswith(".toml"):
            import tomllib

            tree: Any = tomllib.loads(text)
        else:
            tree = YAML(typ="rt").load(io.StringIO(text))
    except Exception as exc:  # noqa: BLE001 - a broken config is a warning; the logs still count
        try:
            tree = json.loads(text)
        except ValueError:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            warnings.append(f"config could not be parsed: {first}")
            return []
    flat: list[tuple[str, Any, int]] = []
    _flatten(tree, "", flat)
    lines = text.splitlines()
    facts = []
    for key, value, line in flat:
        source_line = lines[line - 1] if 0 < line <= len(lines) else f"{key}: {value}"
        evidence = (Evidence(path=display, line=max(line, 1), text=source_line, signature=f"config:{key}"),)
        fields = {"key": key, "name": key.rsplit(".", 1)[-1], "value": value, "path": display, "line": max(line, 1), "source": "file"}
        facts.append(BaseFact("config", fields, evidence))
    return facts


def env_report_facts(display: str, lines: Iterable[tuple[int, str]]) -> list[BaseFact]:
    facts: list[BaseFact] = []
    seen: set[tuple[str, str]] = set()

    def add(type_: str, fields: dict[str, Any], line_no: int, text: str, name: str) -> None:
        key = (type_, name)
        if key in seen:
            return
        seen.add(key)
        fields.update(path=display, line=line_no)
        facts.append(BaseFact(type_, fields, (Evidence(path=display, line=line_no, text=text, signature=f"env:{type_}"),)))

    for line_no, raw in lines:
        text = raw.rstrip("\r\n")
        stripped = text.strip()
        for pattern in (_PLATFORM, _UNAME, _KERNEL):
            match = pattern.match(stripped)
            if match:
                add("kernel", {"version": match.group("kernel")}, line_no, text, "kernel")
        match = _TORCH.match(stripped)
        if match:
            add("package", {"name": "torch", "version": match.group("version")}, line_no, text, "torch")
            continue
        match = _PIP.match(stripped)
        if match and ("==" in stripped or stripped.startswith("[")):
            name = match.group("name").lower().replace("_", "-")
            add("package", {"name": name, "version": match.group("version")}, line_no, text, name)
    return facts


def numbered_lines(stream: ByteStream, limit: int) -> Iterable[tuple[int, str]]:
    data = stream.read(limit)
    yield from enumerate(data.decode("utf-8", "replace").splitlines(), start=1)


def run_facts(mode: str, scans: list[FileScan], inputs: int) -> list[BaseFact]:
    logs = [s for s in scans if s.kind in LOG_KINDS]
    facts = [BaseFact("run", {"mode": mode, "inputs": inputs, "logs": len(logs), "log_lines": sum(s.lines for s in logs)})]
    for scan in scans:
        facts.append(BaseFact("input", {"path": scan.path, "kind": scan.kind.value, "lines": scan.lines}))
    facts.extend(stage_definitions())
    return facts
