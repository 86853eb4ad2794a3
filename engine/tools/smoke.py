"""`rltriage smoke`: reduce the user's own config to a one-step smoke test.

The reduction: num_generations = 2, a 128-token
completion, one prompt, one training step, a stub or cheap local reward, no remote eval. The
reduction is written with the keys the config already uses (TRL `GRPOConfig`, verl, the
disaggregated trainers) and keeps each trainer's batch contracts valid, because a smoke config that
fails its own start-up checks proves nothing.

Three file shapes: YAML (round-tripped with ruamel, comments and key order intact), JSON (key order
kept) and launch scripts / argument files (`--flag value` and Hydra `a.b=value` rewritten in place).
"""

from __future__ import annotations

import difflib
import io
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString
from ruamel.yaml.util import load_yaml_guess_indent

from ..base.errors import InputError
from ..base.values import coerce_config, plain
from ..inputs.filetypes import ARGS_SUFFIXES, JSON_SUFFIXES, SCRIPT_SUFFIXES, YAML_SUFFIXES
from ..pipeline.reduction import COMPLETION_TOKENS, GROUP, STEP_KEYS

STUB_REWARD = "stub_reward"
STUB_DEFINITION = "def stub_reward(completions, **kwargs): return [0.0] * len(completions)"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
_HEADER = "# rltriage smoke test"

_REWARD_LIST_KEYS = ("reward_funcs", "reward_functions", "reward_fns")
_DATASET_SIZE_KEYS = ("max_train_samples", "max_samples", "train_max_samples", "num_train_samples", "max_prompts")
_REMOTE_CONTEXT = re.compile(r"reward|judge|verifier|grader|evaluat|sandbox|(?:^|[._])rm(?:[._]|$)|(?:^|[._])eval", re.IGNORECASE)
# YAML 1.1 readers (PyYAML, which TRL and HfArgumentParser use) turn these plain words into bools/null.
_YAML11_SPECIAL = re.compile(r"^(?:y|n|yes|no|on|off|true|false|null|~)$", re.IGNORECASE)


class SmokeChange(BaseModel):
    key: str
    old: Any = None
    new: Any = None
    added: bool = False
    reason: str


class SmokeResult(BaseModel):
    path: str
    format: str
    trainer: str
    original: str
    text: str
    diff: str
    changes: list[SmokeChange] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Documents: one interface over a YAML tree, a JSON tree and the flags of a launch script.


class _Doc:
    format = ""

    def keys(self) -> list[str]:
        raise NotImplementedError

    def get(self, key: str) -> Any:
        raise NotImplementedError

    def set(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def add(self, parent: str, name: str, value: Any) -> bool:
        raise NotImplementedError

    def render(self, notes: list[str]) -> str:
        raise NotImplementedError

    def can_null(self) -> bool:
        return True


def _walk_tree(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                yield from _walk_tree(value, name)
            elif isinstance(value, list):
                if all(not isinstance(v, (dict, list)) for v in value):
                    yield name, value
            else:
                yield name, value


class _TreeDoc(_Doc):
    """A YAML or JSON mapping; keys are dotted paths of scalar or scalar-list leaves."""

    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = tree

    def keys(self) -> list[str]:
        return [k for k, _ in _walk_tree(self.tree, "")]

    def _parent(self, key: str) -> tuple[dict[str, Any] | None, str]:
        *path, name = key.split(".")
        node: Any = self.tree
        for part in path:
            if not isinstance(node, dict) or part not in node:
                # A key may itself contain a dot (`"a.b": 1`); look it up whole before giving up.
                return (self.tree, key) if key in self.tree else (None, name)
            node = node[part]
        return (node, name) if isinstance(node, dict) else (None, name)

    def get(self, key: str) -> Any:
        parent, name = self._parent(key)
        return None if parent is None else parent.get(name)

    def mapping(self, key: str) -> dict[str, Any] | None:
        node: Any = self.tree
        for part in key.split(".") if key else []:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, dict) else None

    def _value(self, old: Any, value: Any) -> Any:
        return value

    def set(self, key: str, value: Any) -> None:
        parent, name = self._parent(key)
        assert parent is not None
        old = parent.get(name)
        if isinstance(old, list) and isinstance(value, list):
            # Mutate in place: a ruamel sequence keeps its flow/block style and comments.
            del old[:]
            old.extend(self._value(None, v) for v in value)
            return
        parent[name] = self._value(old, value)

    def add(self, parent: str, name: str, value: Any) -> bool:
        node = self.mapping(parent)
        if node is None:
            return False
        node[name] = self._value(None, value)
        return True


class _YamlDoc(_TreeDoc):
    format = "yaml"

    def __init__(self, text: str) -> None:
        self.yaml = YAML(typ="rt")
        self.yaml.preserve_quotes = True
        self.yaml.width = 4096  # never re-wrap long lines the user wrote on one line
        try:
            # The guesser loads without preserve_quotes, so it only supplies the indentation.
            _, indent, offset = load_yaml_guess_indent(text)
            tree = self.yaml.load(text)
        except Exception as exc:  # noqa: BLE001 - any parser error is an unreadable config
            raise InputError(f"not a YAML mapping: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from exc
        if not isinstance(tree, CommentedMap):
            raise InputError("the YAML document is not a mapping of config keys")
        super().__init__(tree)
        mapping = _mapping_indent(text)
        # ruamel's guess describes block sequences (dash column and item column); with none in the
        # file it falls back to the mapping indent and leaves the offset unset.
        self.yaml.indent(mapping=mapping, sequence=indent or mapping, offset=offset if offset is not None else 0)
        # Round-trip mode writes None as an empty value; `null` says plainly what was stubbed out.
        self.yaml.representer.add_representer(type(None), lambda rep, _data: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
        self.ends_with_newline = text.endswith("\n")

    def _value(self, old: Any, value: Any) -> Any:
        if isinstance(value, str):
            if isinstance(old, SingleQuotedScalarString):
                return SingleQuotedScalarString(value)
            if isinstance(old, DoubleQuotedScalarString) or _YAML11_SPECIAL.match(value):
                return DoubleQuotedScalarString(value)
        if isinstance(value, list) and not isinstance(value, CommentedSeq):
            seq = CommentedSeq(self._value(None, v) for v in value)
            seq.fa.set_flow_style()
            return seq
        return value

    def render(self, notes: list[str]) -> str:
        out = io.StringIO()
        self.yaml.dump(self.tree, out)
        return _comment_block(notes) + out.getvalue()


def _mapping_indent(text: str) -> int:
    """The indent of the first nested mapping (`key:` then a deeper `key: …` line); 2 if none."""
    previous: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        column = len(line) - len(line.lstrip(" "))
        if previous is not None and column > previous and not stripped.startswith("- "):
            return column - previous
        previous = column if re.match(r"^[^\s#-][^:#]*:\s*(?:#.*)?$", stripped) else None
    return 2


class _JsonDoc(_TreeDoc):
    format = "json"

    def __init__(self, text: str) -> None:
        try:
            tree = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON: {exc}") from exc
        if not isinstance(tree, dict):
            raise InputError("the JSON document is not an object of config keys")
        super().__init__(tree)
        indent = re.search(r"^\{[ \t]*\r?\n([ \t]+)\S", text)
        self.indent: int | str | None = (len(indent.group(1)) if " " in indent.group(1) else indent.group(1)) if indent else (None if "\n" not in text.strip() else 2)
        self.ends_with_newline = text.endswith("\n")

    def render(self, notes: list[str]) -> str:
        # JSON has no comments: the notes go to the result (and stderr), not into the file.
        return json.dumps(self.tree, indent=self.indent, ensure_ascii=False) + ("\n" if self.ends_with_newline else "")


_FLAG = re.compile(
    r"(?<![\w\-./$])--(?P<key>[A-Za-z][\w-]*(?:\.[\w-]+)*)"
    r"(?:(?P<sep>=|[ \t]+)(?P<val>(?!-[-A-Za-z])(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\\;|&\"'<>()]+)))?"
)
# Hydra overrides (verl and other Hydra launchers): `actor_rollout_ref.rollout.n=8`, `+a.b=1`. At least
# one dot, so shell variables (`NCCL_DEBUG=INFO`) are not taken for config keys.
_HYDRA = re.compile(r"(?<![\w\-./$?&])(?P<plus>\+{0,2})(?P<key>[A-Za-z_]\w*(?:\.\w+)+)=(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^\s\\;|&]*)")
_LIST_TOKEN = re.compile(r"[ \t]+(?!-)([^\s\\;|&\"'<>()]+)")
_LIST_FLAGS = _REWARD_LIST_KEYS + ("reward_weights",)


class _Arg(BaseModel):
    key: str
    style: str  # "flag" or "hydra"
    start: int
    value_start: int
    value_end: int
    sep: str
    raw: list[str]


class _ArgsDoc(_Doc):
    """`--flag value` arguments of a launch script or argument file, rewritten in place."""

    format = "args"

    def __init__(self, text: str, script: bool) -> None:
        self.text = text
        self.script = script
        if not self._scan():
            raise InputError("no launch command with `--flag value` or `a.b=value` arguments found")

    def _scan(self) -> list[_Arg]:
        args: list[_Arg] = []
        taken: list[tuple[int, int]] = []
        comments = [(m.start(), m.end()) for m in re.finditer(r"(?m)^[ \t]*#.*$", self.text)]
        commands = _command_spans(self.text)

        def free(start: int, end: int) -> bool:
            if not any(a <= start < b for a, b in commands):
                return False  # a flag in prose or in code, not on a launch command line: never edited
            return not any(a <= start < b for a, b in comments) and not any(a < end and start < b for a, b in taken)

        for match in _FLAG.finditer(self.text):
            if not free(match.start(), match.end()):
                continue
            key = match.group("key").replace("-", "_")
            if match.group("val") is None:
                args.append(_Arg(key=key, style="flag", start=match.start(), value_start=match.end(), value_end=match.end(), sep="", raw=[]))
                taken.append((match.start(), match.end()))
                continue
            raw = [match.group("val")]
            end = match.end()
            if key.rsplit(".", 1)[-1] in _LIST_FLAGS and match.group("sep") != "=":
                # HfArgumentParser list fields take several space-separated values (nargs="+").
                while (extra := _LIST_TOKEN.match(self.text, end)) is not None:
                    raw.append(extra.group(1))
                    end = extra.end()
            args.append(_Arg(key=key, style="flag", start=match.start(), value_start=match.start("val"), value_end=end, sep=match.group("sep"), raw=raw))
            taken.append((match.start(), end))
        for match in _HYDRA.finditer(self.text):
            if free(match.start(), match.end()):
                args.append(_Arg(key=match.group("key"), style="hydra", start=match.start(), value_start=match.start("val"), value_end=match.end(), sep="=", raw=[match.group("val")]))
                taken.append((match.start(), match.end()))
        return sorted(args, key=lambda a: a.start)

    def _find(self, key: str) -> _Arg | None:
        return next((a for a in self._scan() if a.key == key), None)

    def keys(self) -> list[str]:
        seen: dict[str, None] = {}
        for arg in self._scan():
            seen.setdefault(arg.key, None)
        return list(seen)

    def get(self, key: str) -> Any:
        arg = self._find(key)
        if arg is None:
            return None
        if not arg.raw:
            return True  # a bare boolean flag
        values = [coerce_config(v) for v in arg.raw]
        if arg.key.rsplit(".", 1)[-1] in _LIST_FLAGS:
            if len(values) == 1 and isinstance(values[0], str) and "," in values[0]:
                return [coerce_config(v) for v in values[0].split(",")]
            return values
        return values[0]

    def _format(self, value: Any, style: str) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if value is None:
            return "null"
        if isinstance(value, list):
            items = [self._format(v, style) for v in value]
            return "[" + ",".join(items) + "]" if style == "hydra" else " ".join(items)
        return str(value)

    def set(self, key: str, value: Any) -> None:
        arg = self._find(key)
        assert arg is not None
        new = self._format(value, arg.style)
        if not arg.raw:
            new = " " + new
        elif arg.raw[0][:1] in ("'", '"') and not isinstance(value, list):
            new = arg.raw[0][0] + new + arg.raw[0][0]
        self.text = self.text[: arg.value_start] + new + self.text[arg.value_end :]

    def add(self, parent: str, name: str, value: Any) -> bool:
        args = self._scan()
        hydra = any(a.style == "hydra" for a in args) and not any(a.style == "flag" and "." not in a.key for a in args)
        style = "hydra" if hydra else "flag"
        if not args or (style == "flag" and parent):
            return False
        last = args[-1]
        key = f"{parent}.{name}" if parent else name
        addition = f" {key}={self._format(value, style)}" if style == "hydra" else f" --{name} {self._format(value, style)}"
        self.text = self.text[: last.value_end] + addition + self.text[last.value_end :]
        return True

    def can_null(self) -> bool:
        # HfArgumentParser would read `null` as the string "null"; only Hydra has a null literal.
        return all(a.style == "hydra" for a in self._scan())

    def render(self, notes: list[str]) -> str:
        if not notes or not self.script:
            return self.text
        block = _comment_block(notes)
        if self.text.startswith("#!"):
            head, _, rest = self.text.partition("\n")
            return head + "\n" + block + rest
        return block + self.text


# What a launch command line starts with: a launcher, a script, a variable holding one, or the
# arguments themselves (an argument file, a `"--flag value …"` string).
_LAUNCHER = re.compile(
    r"""^(?:python[\d.]*|accelerate|torchrun|deepspeed|srun|mpirun|mpiexec|ray|trl|uv|uvx|exec|env|nohup|time|"""
    r"""bash|sh|sbatch|apptainer|singularity|docker|podman|\S*\.py|\S*\.sh|["']?\$\{?\w+\}?["']?)$"""
)
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=\S*$")
_HYDRA_START = re.compile(r"^\+{0,2}[A-Za-z_]\w*(?:\.\w+)+=")


def _command_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of the logical lines (backslash continuations joined) that are launch
    commands or bare arguments; flags elsewhere (prose, Python source, heredocs) are not arguments."""
    spans: list[tuple[int, int]] = []
    start = position = 0
    logical: list[str] = []

    def close() -> None:
        words = " ".join(logical).split()
        while words and _ENV_ASSIGNMENT.match(words[0]):
            words = words[1:]
        if not words:
            return
        first = words[0]
        if first.startswith("--") or _HYDRA_START.match(first) or _LAUNCHER.match(first) or _LAUNCHER.match(first.rsplit("/", 1)[-1]):
            spans.append((start, position))

    for line in text.splitlines(keepends=True):
        if not logical:
            start = position
        position += len(line)
        body = line.rstrip("\r\n")
        logical.append(body)
        if not body.endswith("\\"):
            close()
            logical = []
    if logical:
        close()
    return spans


def _comment_block(notes: list[str]) -> str:
    if not notes:
        return ""
    lines = [_HEADER + " — still to do by hand:"]
    lines.extend(f"#   - {note}" for note in notes)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The reduction.


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, list) and isinstance(new, list):
        return [coerce_config(str(v)) for v in old] == [coerce_config(str(v)) for v in new]
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new or (isinstance(old, str) and str(new).lower() == old.lower())
    return bool(old == new or (old is not None and new is not None and str(old) == str(new)))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        parsed = coerce_config(value)
        return parsed if isinstance(parsed, int) and not isinstance(parsed, bool) else None
    return None


class _Plan:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.all_keys = doc.keys()
        self.changes: list[SmokeChange] = []
        self.notes: list[str] = []

    def find(self, *names: str) -> list[str]:
        return [k for k in self.all_keys if any(k == n or k.endswith("." + n) for n in names)]

    def first(self, *names: str) -> str | None:
        for name in names:
            found = self.find(name)
            if found:
                return found[0]
        return None

    def value(self, key: str | None) -> Any:
        return None if key is None else self.doc.get(key)

    def set(self, key: str, value: Any, reason: str) -> None:
        old = self.doc.get(key)
        if isinstance(old, str) and old.strip().startswith("${"):
            # A Hydra/OmegaConf interpolation points at another key; that key is the one to change.
            return
        if _same(old, value):
            return
        before = _as_plain(old)  # copied first: a list is rewritten in place
        self.doc.set(key, value)
        self.changes.append(SmokeChange(key=key, old=before, new=_as_plain(value), reason=reason))

    def add(self, parent: str, name: str, value: Any, reason: str) -> bool:
        if not self.doc.add(parent, name, value):
            return False
        key = f"{parent}.{name}" if parent else name
        self.all_keys.append(key)
        self.changes.append(SmokeChange(key=key, new=_as_plain(value), added=True, reason=reason))
        return True

    def reduce_if_larger(self, key: str | None, value: int, reason: str) -> None:
        current = _int(self.value(key))
        if key is not None and (current is None or current > value):
            self.set(key, value, reason)


def _as_plain(value: Any) -> Any:
    return plain(value, text_fallback=True)


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b) if a and b else max(a, b)


def _trainer(keys: list[str]) -> str:
    if any(k.startswith(("actor_rollout_ref.", "algorithm.adv_estimator")) for k in keys) or (
        any(k.startswith("trainer.") for k in keys) and any(k.startswith("data.") for k in keys)
    ):
        return "verl"
    if any(k.endswith(("batch_per_replica", "rl.group_size")) or k.startswith("grid.shapes") for k in keys):
        return "disaggregated"
    return "trl"


def _plan_trl(plan: _Plan) -> int:
    """GRPOConfig: returns how many prompts one step draws."""
    key = plan.first("num_generations")
    reason = f"{GROUP} completions per prompt — the smallest group GRPO can compute an advantage over"
    if key:
        plan.set(key, GROUP, reason)
    else:
        plan.add("", "num_generations", GROUP, reason + " (GRPOConfig's default is 8)")
    plan.reduce_if_larger(plan.first("max_completion_length"), COMPLETION_TOKENS, f"{COMPLETION_TOKENS}-token completions keep the first rollout short")
    plan.reduce_if_larger(plan.first("gradient_accumulation_steps"), 1, "one generation and one optimizer update per step")
    spg_key = plan.first("steps_per_generation")
    plan.reduce_if_larger(spg_key, 1, "one optimizer update per generation")
    procs_key = plan.first("num_processes")
    procs = _int(plan.value(procs_key)) or 1
    pd_key = plan.first("per_device_train_batch_size")
    pd = _int(plan.value(pd_key)) or 8  # TrainingArguments' default
    gbs_key = plan.first("generation_batch_size")
    if gbs_key is not None and _int(plan.value(gbs_key)) is not None:
        gbs = _lcm(pd * procs, GROUP)
        plan.set(
            gbs_key,
            gbs,
            f"generation_batch_size must be divisible by num_generations={GROUP} and by per_device_train_batch_size × num_processes = "
            f"{pd} × {procs}{'' if procs_key else ' (one process assumed)'}: {gbs} is the smallest such batch",
        )
        if not procs_key:
            plan.notes.append(
                f"generation_batch_size={gbs} assumes one process; with N processes use the smallest multiple of {pd} × N that is divisible by {GROUP}"
            )
        return gbs // GROUP
    # Without num_processes in the config the process count is unknown: an even per-device batch
    # keeps num_processes × per_device_train_batch_size divisible by 2 for any count.
    need_procs = procs if procs_key else 1
    new_pd = pd
    while (new_pd * need_procs) % GROUP:
        new_pd += 1
    if new_pd != pd:
        reason = (
            f"num_processes × per_device_train_batch_size × gradient_accumulation_steps must be divisible by num_generations={GROUP}"
            + ("" if procs_key else " for any process count")
        )
        if pd_key:
            plan.set(pd_key, new_pd, reason)
        else:
            plan.add("", "per_device_train_batch_size", new_pd, reason)
    return max(1, new_pd * procs // GROUP)


def _plan_verl(plan: _Plan) -> int:
    n_key = plan.first("actor_rollout_ref.rollout.n")
    reason = f"{GROUP} responses per prompt (GRPO group size) — the smallest group with an advantage"
    if n_key:
        plan.set(n_key, GROUP, reason)
    elif not plan.add("actor_rollout_ref.rollout", "n", GROUP, reason):
        plan.notes.append(f"set actor_rollout_ref.rollout.n={GROUP}")
    plan.reduce_if_larger(plan.first("data.max_response_length"), COMPLETION_TOKENS, f"{COMPLETION_TOKENS}-token responses keep the first rollout short")
    nodes = _int(plan.value(plan.first("trainer.nnodes")))
    gpus = _int(plan.value(plan.first("trainer.n_gpus_per_node")))
    if nodes is None or gpus is None:
        plan.notes.append("trainer.nnodes / trainer.n_gpus_per_node not given as numbers: batch sizes assume the missing factor is 1")
    world = (nodes or 1) * (gpus or 1)
    # verl splits the step's prompts × n samples evenly over all GPUs: the smallest prompt count that
    # does so is world / gcd(world, n).
    prompts = world // math.gcd(world, GROUP)
    per_gpu = prompts * GROUP // world
    why = f"{prompts} prompt(s) × n={GROUP} = {prompts * GROUP} samples split evenly over {world} GPU(s)"
    train_key = plan.first("data.train_batch_size")
    if train_key:
        plan.set(train_key, prompts, f"the smallest batch with {why}")
    plan.reduce_if_larger(plan.first("data.gen_batch_size"), prompts, f"generate only the step's {prompts} prompt(s)")
    for key in plan.find("ppo_mini_batch_size"):
        plan.reduce_if_larger(key, prompts, f"one mini-batch per step; must not exceed data.train_batch_size={prompts}")
    for key in plan.find("ppo_micro_batch_size_per_gpu"):
        current = _int(plan.value(key))
        if current is not None and per_gpu % current:
            plan.set(key, per_gpu, f"must divide the per-GPU mini-batch ({prompts} × {GROUP} / {world} = {per_gpu})")
    steps_reason = "one training step"
    if not plan.find(*STEP_KEYS) and not plan.add("trainer", "total_training_steps", 1, steps_reason):
        plan.notes.append("set trainer.total_training_steps=1")
    plan.reduce_if_larger(plan.first("trainer.total_epochs"), 1, steps_reason)
    for key in plan.find("trainer.save_freq"):
        if (_int(plan.value(key)) or 0) > 0:
            plan.set(key, -1, "no checkpoint after the single step")
    for key in plan.find("reward_model.enable"):
        if plan.value(key) is True:
            plan.set(key, False, "a reward model is a second heavy model in the step path; the smoke test uses the local rule reward")
    custom = plan.value(plan.first("custom_reward_function.path"))
    if isinstance(custom, str) and custom:
        plan.notes.append(
            f"custom_reward_function.path={custom}: point it at a stub file whose compute_score(data_source, solution_str, ground_truth, extra_info=None) returns 0.0"
        )
    return prompts


def _plan_disaggregated(plan: _Plan) -> int:
    group_key = plan.first("rl.group_size", "group_size")
    if group_key:
        plan.set(group_key, GROUP, f"{GROUP} trajectories per prompt group — the smallest group with an advantage")
    else:
        plan.notes.append(f"set the group size (rl.group_size) to {GROUP}")
    why_tokens = f"{COMPLETION_TOKENS}-token rollouts keep the first step short"
    plan.reduce_if_larger(plan.first("rollout.max_tokens"), COMPLETION_TOKENS, why_tokens)
    for key in plan.find("validation.max_tokens"):
        plan.reduce_if_larger(key, COMPLETION_TOKENS, "reduced together with rollout.max_tokens")
    shape = plan.value(plan.first("grid.shapes.policy"))
    dp_world = _int(shape[-1]) if isinstance(shape, list) and shape else None
    if dp_world is None:
        plan.notes.append("grid.shapes.policy not given: batch sizes assume a policy dp_world of 1")
    dp_world = dp_world or 1
    micro_key = plan.first("micro_batch_per_replica")
    if micro_key:
        current = _int(plan.value(micro_key))
        if current is None or current != dp_world:
            plan.set(micro_key, dp_world, f"the smallest legal micro batch: a multiple of the policy's dp_world={dp_world}")
    batch = _lcm(GROUP, dp_world)
    batch_key = plan.first("batch_per_replica")
    if batch_key:
        plan.set(
            batch_key,
            batch,
            f"{batch // GROUP} whole prompt group(s) of {GROUP}; a multiple of rl.micro_batch_per_replica={dp_world}",
        )
    mini_key = plan.first("mini_batch_per_replica")
    if mini_key:
        plan.set(mini_key, batch, "one mini batch per step (n_mini == 1)")
    for key in plan.find("min_informative_groups", "min_informative_groups_frac"):
        if (plan.value(key) or 0) > 0:
            plan.set(key, 0, "a stub reward ties every group; dynamic sampling would abort the step")
    if not plan.find(*STEP_KEYS):
        plan.notes.append("set the run's step count to 1 (this config names no step key)")
    return batch // GROUP


def _plan_common(plan: _Plan, trainer: str, prompts: int) -> None:
    steps = plan.find(*STEP_KEYS)
    for key in steps:
        plan.set(key, 1, "one training step")
    if not steps and trainer == "trl":
        if not plan.add("", "max_steps", 1, "one training step"):
            plan.notes.append("set max_steps=1")
    for key in plan.find("eval_strategy", "evaluation_strategy"):
        plan.set(key, "no", "no evaluation in the smoke test")
    for key in plan.find("do_eval", "eval_on_start", "val_before_train"):
        plan.set(key, False, "no evaluation in the smoke test")
    for key in plan.find("test_freq"):
        plan.set(key, -1, "no validation in the smoke test (verl: test_freq <= 0 disables it)")
    for key in plan.find("logging_steps"):
        plan.reduce_if_larger(key, 1, "log step 1: its log line carries the reward and step time the verification needs")
    eval_off = any(c.key.rsplit(".", 1)[-1] in ("eval_strategy", "evaluation_strategy", "do_eval", "test_freq", "val_before_train") for c in plan.changes)
    for key in plan.all_keys:
        parts = key.split(".")
        if parts[-1] in ("enable", "enabled") and any(re.match(r"^(?:val|validation|eval|evaluation)$", p) for p in parts[:-1]):
            if plan.value(key) is True:
                plan.set(key, False, "no validation in the smoke test")
            eval_off = True
    if not eval_off and any(re.search(r"(?:^|\.)(?:validation|eval|evaluation)(?:\.|$)", k) for k in plan.all_keys):
        plan.notes.append("turn validation/evaluation off for the smoke test (no key for it found in this config)")

    stubbed = False
    for key in plan.find(*_REWARD_LIST_KEYS):
        value = plan.value(key)
        if isinstance(value, list):
            plan.set(key, [STUB_REWARD], f"a cheap local reward instead of {', '.join(map(str, value)) or 'the configured ones'}")
        elif isinstance(value, str) and value:
            plan.set(key, STUB_REWARD, f"a cheap local reward instead of {value}")
        stubbed = True
    for key in plan.find("reward_weights"):
        if isinstance(plan.value(key), list):
            plan.set(key, [1.0], "one weight for the one stub reward")
    remote = False
    for key in list(plan.all_keys):
        value = plan.value(key)
        if isinstance(value, str) and re.match(r"^\s*https?://", value) and _REMOTE_CONTEXT.search(key):
            remote = True
            if plan.doc.can_null():
                plan.set(key, None, "no remote reward/eval call in the step path (stubbed out)")
            else:
                plan.notes.append(f"{key}={value}: remote reward/eval in the step path — stub it out for the smoke test")
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            for flag in (f"{parent}.enable", f"{parent}.enabled") if parent else ():
                if plan.value(flag) is True:
                    plan.set(flag, False, "the remote endpoint is not called in the smoke test")
    if stubbed:
        plan.notes.append(f"define the stub reward the config now names: {STUB_DEFINITION}")
    elif remote:
        plan.notes.append(f"use a cheap local reward while the remote endpoint is stubbed out, e.g. {STUB_DEFINITION}")
    elif trainer != "verl":
        plan.notes.append(f"the config names no reward function: stub remote or heavy rewards in the training script, e.g. {STUB_DEFINITION}")

    size_keys = plan.find(*_DATASET_SIZE_KEYS)
    for key in size_keys:
        plan.set(key, prompts, f"only the prompt(s) one step draws ({prompts})")
    if not size_keys:
        how = f"a train_files parquet of {prompts} row(s)" if trainer == "verl" else f"e.g. dataset.select(range({prompts}))"
        plan.notes.append(f"limit the dataset to {prompts} prompt(s) — one step draws {prompts} ({how})")


def _load(text: str, path: str, kind: str | None) -> _Doc:
    suffix = Path(path).suffix.lower()
    kind = kind or ("json" if suffix in JSON_SUFFIXES else "yaml" if suffix in YAML_SUFFIXES else "args" if suffix in ARGS_SUFFIXES else None)
    if kind == "json":
        return _JsonDoc(text)
    if kind == "yaml":
        return _YamlDoc(text)
    if kind == "args":
        return _ArgsDoc(text, script=suffix in SCRIPT_SUFFIXES or text.startswith("#!"))
    # Unknown suffix: the content decides.
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return _JsonDoc(text)
        except InputError:
            pass
    if not stripped.startswith("--") and not text.startswith("#!"):
        try:
            doc = _YamlDoc(text)
            if doc.keys():
                return doc
        except InputError:
            pass
    try:
        return _ArgsDoc(text, script=text.startswith("#!"))
    except InputError:
        raise InputError(f"{path}: unknown config format (expected YAML, JSON, or a launch script with --flag arguments)") from None


# Keys only an RL training config has (leaf names, or the first part of a dotted key): a document
# with none of them is not a config `smoke` understands, and is refused rather than "reduced".
_TRAINING_LEAVES = frozenset(
    {
        "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "generation_batch_size", "steps_per_generation",
        "max_completion_length", "max_prompt_length", "max_steps", "num_train_epochs", "model_name_or_path", "reward_funcs",
        "reward_functions", "use_vllm", "vllm_mode", "train_batch_size", "ppo_mini_batch_size", "max_response_length",
        "total_training_steps", "total_epochs", "group_size", "rollout_batch_size", "micro_train_batch_size", "n_samples_per_prompt",
        "generate_max_len", "pretrain", "reward_pretrain",
    }
)
_TRAINING_ROOTS = frozenset({"actor_rollout_ref", "algorithm", "rl", "critic", "reward_model", "custom_reward_function"})
# Files that are never a config or a launch command, whatever flags their text mentions.
_NOT_CONFIG_SUFFIXES = {
    ".py": "a Python source file", ".ipynb": "a notebook", ".md": "a Markdown document", ".rst": "a reStructuredText document",
    ".html": "an HTML page", ".htm": "an HTML page", ".log": "a log", ".err": "a log", ".out": "a log",
}


def _is_training_config(keys: list[str]) -> bool:
    return any(key.rsplit(".", 1)[-1] in _TRAINING_LEAVES or key.split(".", 1)[0] in _TRAINING_ROOTS for key in keys)


def smoke_text(text: str, *, name: str = "config", kind: str | None = None, output_name: str | None = None) -> SmokeResult:
    """Apply the smoke-test reduction to config text. `kind` forces "yaml", "json" or "args".

    Raises InputError for text that is not a TRL, verl or disaggregated-trainer config or launch
    command (no RL training key in it): nothing is reduced that was not understood.
    """
    what = _NOT_CONFIG_SUFFIXES.get(Path(name).suffix.lower())
    if what and kind is None:
        raise InputError(f"{name}: {what}, not a config or launch command; give the YAML/JSON config or the launch script")
    doc = _load(text, name, kind)
    if not _is_training_config(doc.keys()):
        raise InputError(
            f"{name}: not a TRL, verl or disaggregated-trainer config (none of its {len(doc.keys())} key(s) is a training setting such as "
            "num_generations, per_device_train_batch_size, actor_rollout_ref.* or rl.*)"
        )
    plan = _Plan(doc)
    trainer = _trainer(plan.all_keys)
    prompts = {"trl": _plan_trl, "verl": _plan_verl, "disaggregated": _plan_disaggregated}[trainer](plan)
    _plan_common(plan, trainer, prompts)
    # An already-reduced config stays byte-identical; its to-do block is not written twice.
    new = doc.render([] if _HEADER in text else plan.notes) if plan.changes else text
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=name,
            tofile=output_name or f"{name} (smoke test)",
        )
    )
    return SmokeResult(path=name, format=doc.format, trainer=trainer, original=text, text=new, diff=diff, changes=plan.changes, notes=plan.notes)


def smoke(path: str | os.PathLike[str], *, output_name: str | None = None) -> SmokeResult:
    """Apply the smoke-test reduction to a config file. Never prints and never writes.

    Raises InputError for a missing, unreadable or unrecognised config.
    """
    file = Path(path)
    try:
        data = file.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except OSError as exc:
        raise InputError(f"{file}: {exc.strerror or exc}") from exc
    if len(data) > MAX_CONFIG_BYTES or b"\0" in data[:8192]:
        raise InputError(f"{file}: not a config file (binary or larger than {MAX_CONFIG_BYTES} bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{file}: not UTF-8 text") from exc
    try:
        return smoke_text(text, name=os.fspath(path), output_name=output_name)
    except InputError as exc:
        message = str(exc)
        raise InputError(message if message.startswith(os.fspath(path)) else f"{os.fspath(path)}: {message}") from None
