"""Stage 6 — render: fix and patch-plan templates per cause, the six-section report, and the
output formats of a diagnosis."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, select_autoescape
from pydantic import TypeAdapter

from .._version import __version__
from ..base.contract import Diagnosis, InputSummary
from ..base.values import human_size
from ..base.vocabulary import BUCKET_TITLES
from ..infer.fact import Fact
from ..inputs.failures import package_of
from ..kb.diskcache import cache_dir
from ..kb.knowledge import KnowledgeBase, LoadedRule
from ..kb.sandbox import BoundedSandbox, PackLoader, bounded, render_bounded, template_cache
from .html import render_html
from .reduction import reduction
from .timeline import RunDetails

REPORT_LIMIT = 64 << 20  # characters of a whole report (its size follows the run's, which is bounded)
REPORT_SECONDS = 30.0


def _environment(kb: KnowledgeBase) -> BoundedSandbox:
    folder = cache_dir()
    # The options below change the compiled code: this module's bytes are part of the cache's key.
    with open(__file__, "rb") as handle:
        code = f"{__version__} {hashlib.sha256(handle.read()).hexdigest()}"
    env = BoundedSandbox(
        loader=PackLoader([str(p) for p in kb.template_dirs]),
        undefined=StrictUndefined,
        autoescape=select_autoescape(enabled_extensions=(), default_for_string=False, default=False),
        bytecode_cache=template_cache(str(folder) if folder else None, code),
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["size"] = human_size
    env.filters["fmt"] = fmt_number
    return env


def environment(kb: KnowledgeBase) -> BoundedSandbox:
    """A sandboxed Jinja environment (templates come from rule packs, which are untrusted), built
    once per knowledge base and kept with it."""
    return kb.cache.get("templates", lambda: _environment(kb))


def fmt_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class ConfigView:
    """What templates see of the run's config: lookups by full key or by its last part(s)."""

    def __init__(self, facts: list[Fact]) -> None:
        # Values from config files win over values echoed in logs; the first of each wins.
        ordered = sorted(facts, key=lambda f: (f.get("source") != "file", f.id))
        self._facts = ordered

    def _find(self, name: str) -> Fact | None:
        for fact in self._facts:
            key = str(fact.get("key"))
            if key == name or key.endswith("." + name):
                return fact
        return None

    def get(self, name: str, default: Any = None) -> Any:
        fact = self._find(name)
        return fact.get("value") if fact is not None else default

    def key(self, name: str, default: str | None = None) -> str:
        fact = self._find(name)
        return str(fact.get("key")) if fact is not None else (default or name)

    def at(self, name: str) -> str:
        fact = self._find(name)
        return f"{fact.get('path')}:{fact.get('line')}" if fact is not None else ""

    def has(self, name: str) -> bool:
        return self._find(name) is not None

    def where(self, name: str) -> str:
        fact = self._find(name)
        return str(fact.get("path")) if fact is not None else ""


# A code location in a frame: py-spy / faulthandler `func (path.py:57)`, traceback `path.py:57 in func`.
_FRAME_AT = re.compile(r"\((?P<file>[^()\s]+\.py):(?P<line>\d+)\)|^(?P<tb_file>\S+\.py):(?P<tb_line>\d+) in ")


def code_locations(facts: list[Fact], hint: str | None = None) -> list[str]:
    """`path.py:line` of the run's own code (not a library's) that stacks and tracebacks name, in
    citation order; with `hint`, only frames whose text matches it (e.g. 'reward|judge')."""
    wanted = re.compile(hint, re.IGNORECASE) if hint else None
    found: dict[str, None] = {}
    framed = [f for f in facts if (f.type == "failure" and f.get("user_frame")) or (f.type in ("hit", "stack") and f.get("stack"))]
    framed.sort(key=lambda f: (f.evidence[0].path, f.evidence[0].line) if f.evidence else ("", 0))
    for fact in framed:
        text = str(fact.get("user_frame") if fact.type == "failure" else (fact.get("text") if fact.type == "hit" else fact.get("top")) or "")
        match = _FRAME_AT.search(text)
        if match is None or (wanted is not None and not wanted.search(text)):
            continue
        path = match["file"] or match["tb_file"]
        if package_of(path) != "user":
            continue
        found.setdefault(f"{path}:{match['line'] or match['tb_line']}", None)
    return list(found)


def template_context(bindings: Mapping[str, Mapping[str, Any]], facts: list[Fact]) -> dict[str, Any]:
    config = ConfigView([f for f in facts if f.type == "config"])
    packages = {str(f.get("name")): f.get("version") for f in facts if f.type == "package"}
    kernels = [f.get("version") for f in facts if f.type == "kernel"]
    context: dict[str, Any] = {alias: dict(fields) for alias, fields in bindings.items()}
    context.update(
        cfg=config.get,
        cfg_key=config.key,
        cfg_at=config.at,
        has_cfg=config.has,
        # The run's own code a stack or traceback names (`code_at('reward')`), "" when none does.
        code_at=lambda hint=None: next(iter(code_locations(facts, hint)), ""),
        # The smoke-test value of a concept (`smoke_value('max_completion_length')` is 128), so a
        # cause's patch plan and the smoke-test plan never give one key two values.
        smoke_value=lambda concept: reduction(concept).value,
        package=packages.get,
        kernel=kernels[0] if kernels else None,
    )
    return context


def render_fix(kb: KnowledgeBase, loaded: LoadedRule, context: Mapping[str, Any]) -> str:
    env = environment(kb)
    model = loaded.model
    name = model.fix_template
    template = bounded(lambda: env.get_template(name) if name else env.from_string(model.fix or ""))
    return _tidy(render_bounded(template, context))


def render_string(kb: KnowledgeBase, text: str, context: Mapping[str, Any]) -> str:
    env = environment(kb)
    return _tidy(render_bounded(bounded(lambda: env.from_string(text)), context))


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def render_report(kb: KnowledgeBase, diagnosis: Diagnosis, fmt: str, colour: bool = False) -> str:
    env = environment(kb)
    name = f"report/report.{'md' if fmt == 'markdown' else 'txt'}.j2"
    template = bounded(lambda: env.get_template(name), REPORT_SECONDS)
    styles = _STYLES if colour else {k: "" for k in _STYLES}
    text = render_bounded(template, {"d": diagnosis, "s": styles, "bucket_titles": _bucket_titles()}, REPORT_LIMIT, REPORT_SECONDS)
    return _tidy(text) + "\n"


def _bucket_titles() -> dict[str, str]:
    return {b.value: t for b, t in BUCKET_TITLES.items()}


_STYLES = {"h": "\x1b[1m", "dim": "\x1b[2m", "red": "\x1b[31m", "yellow": "\x1b[33m", "green": "\x1b[32m", "off": "\x1b[0m"}


JSON_SLICE = 2048  # inputs written to json at a time


def _json(kb: KnowledgeBase, diagnosis: Diagnosis, colour: bool, details: Details) -> Iterator[str]:
    """The diagnosis as pydantic writes it with indent=2, byte for byte, but with its list of inputs
    written a slice at a time: a folder of 100,000 files lists as many, and the whole json in one
    string (with pydantic's buffer before it) took tens of megabytes at once."""
    inputs = diagnosis.inputs
    if len(inputs) <= JSON_SLICE:
        yield diagnosis.model_dump_json(indent=2) + "\n"
        return
    rest = diagnosis.model_copy(update={"inputs": []}).model_dump_json(indent=2)
    # A top-level key is the only text at two spaces' indent after a newline (strings hold no raw
    # newline), and `inputs` is there once.
    key = '\n  "inputs": [],\n'
    cut = rest.index(key)
    yield rest[:cut] + '\n  "inputs": [\n'
    for start in range(0, len(inputs), JSON_SLICE):
        listed = _INPUTS_JSON.dump_json(inputs[start : start + JSON_SLICE], indent=2).decode()
        # `[\n  {…},\n  {…}\n]` one level deeper, without its brackets.
        yield ("" if start == 0 else ",\n") + "  " + listed[2:-2].replace("\n", "\n  ")
    yield "\n  ],\n" + rest[cut + len(key) :] + "\n"


_INPUTS_JSON = TypeAdapter(list[InputSummary])


# What a format may show beyond the diagnosis (the html format's per-process timeline and log
# excerpts): built from the analysis only when a format calls it, since it reads the inputs again.
Details = Callable[[], RunDetails] | None

# The output formats of a diagnosis: name → how to write it, in pieces to be written one after the
# other. A new format is one entry here.
FORMATS: dict[str, Callable[[KnowledgeBase, Diagnosis, bool, Details], Iterable[str]]] = {
    "text": lambda kb, diagnosis, colour, details: (render_report(kb, diagnosis, "text", colour=colour),),
    "markdown": lambda kb, diagnosis, colour, details: (render_report(kb, diagnosis, "markdown", colour=colour),),
    "json": _json,
    "html": lambda kb, diagnosis, colour, details: (render_html(kb, diagnosis, details() if details is not None else None),),
}


def format_pieces(diagnosis: Diagnosis, fmt: str, kb: KnowledgeBase, colour: bool = False, details: Details = None) -> Iterable[str]:
    """A diagnosis in one of FORMATS, in the pieces the CLI writes one at a time (a report is never
    held whole when its format can help it); `details` is usually `analysis.details`."""
    return FORMATS[fmt](kb, diagnosis, colour, details)


def format_diagnosis(diagnosis: Diagnosis, fmt: str, kb: KnowledgeBase, colour: bool = False, details: Details = None) -> str:
    """A diagnosis in one of FORMATS, whole."""
    return "".join(format_pieces(diagnosis, fmt, kb, colour, details))
