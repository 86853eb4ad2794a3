"""Jinja for rule packs, which are written by strangers: nothing a template does may take more than
a bounded amount of time or memory.

Jinja's `ImmutableSandboxedEnvironment` keeps templates away from Python internals; it does not
bound what they compute. On top of it:

- operators on sizes (`*`, `**`, `+`, `%`) are checked before they run, so `'a' * 10**9` or
  `9**(9**10)` is refused instead of computed. Intercepting them also stops Jinja from folding them
  at compile time, which is where `9**(9**10)` used to hang loading a pack;
- every filter, and every method of a string, is called with its numbers (widths, counts) checked,
  the size of what `join`, `replace`, `indent` and format strings would make checked beforehand,
  and what it returns checked after;
- `range` gives at most MAX_SEQUENCE items and `lipsum` is gone;
- a template or expression that can loop (`{% for %}`, macros, includes, filters and calls that
  iterate) runs under a guard that stops it after RENDER_SECONDS of its thread's processor time (a busy
  machine or other threads do not stretch it) or once the resident memory has grown by RENDER_MEMORY, whatever
  it loops over. The others, which the checks above already
  bound (what rule tests and most fixes are), run without it: the guard is a line tracer and costs;
- a rendered text longer than its limit is stopped while it is produced (`render_bounded`).

Every refusal is a `TemplateLimit`, which the callers treat like any template error.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import resource
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from jinja2 import BaseLoader, Environment, Template, TemplateNotFound, nodes
from jinja2.bccache import Bucket, FileSystemBytecodeCache
from jinja2.exceptions import SecurityError
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .diskcache import store

MAX_OUTPUT = 64 * 1024  # characters a rendered piece, or a string made while rendering, may have
MAX_SEQUENCE = 10_000  # items of a list or range made while rendering
MAX_NUMBER = 10_000  # a width, count or repeat given to a filter or string method
MAX_INT_BITS = 4096  # integers computed while rendering
RENDER_SECONDS = 2.0
RENDER_MEMORY = 32 << 20  # growth of the process's resident memory one render may cause
MAX_TEMPLATE_BYTES = 1 << 20

T = TypeVar("T")


class TemplateLimit(SecurityError):
    """A template tried to compute more than a rule pack may."""


# --- the guard: time and memory, however the template loops --------------------------------------


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int:
    """The process's resident memory now. Not its peak (`ru_maxrss`): a long-lived process, or a
    fork of one, may have peaked far above where it is, and a render could grow that far unseen."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


class _Guard:
    __slots__ = ("deadline", "memory", "events", "seconds")

    def __init__(self, seconds: float, memory: int) -> None:
        self.seconds = seconds
        self.deadline = time.thread_time() + seconds
        self.memory = _resident_bytes() + memory
        self.events = 0

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        self.events += 1
        if not self.events & 31:
            if time.thread_time() > self.deadline:
                raise TemplateLimit(f"template took more than {self.seconds:g} s of processor time")
            # Reading the resident size costs more than the clock: a few times less often (what one
            # step can allocate is bounded by the size checks).
            if not self.events & 255 and _resident_bytes() > self.memory:
                raise TemplateLimit(f"template used more than {RENDER_MEMORY >> 20} MiB")
        return self.trace


@contextmanager
def guarded(seconds: float = RENDER_SECONDS, memory: int = RENDER_MEMORY) -> Iterator[None]:
    """Run the block with a line tracer that stops it after `seconds` or `memory` bytes of growth
    of the resident set. The previous tracer (a debugger, coverage) is put back afterwards."""
    previous = sys.gettrace()
    guard = _Guard(seconds, memory)
    sys.settrace(guard.trace)
    try:
        yield
    finally:
        sys.settrace(previous)


def bounded(call: Callable[[], T], seconds: float = RENDER_SECONDS) -> T:
    with guarded(seconds):
        return call()


@contextmanager
def _maybe_guarded(simple: bool, seconds: float) -> Iterator[None]:
    if simple:
        yield
    else:
        with guarded(seconds):
            yield


def render_bounded(template: Template, context: Mapping[str, Any], limit: int = MAX_OUTPUT, seconds: float = RENDER_SECONDS) -> str:
    """`template` rendered (under the guard when it can loop), stopped as soon as its output passes
    `limit` characters."""
    parts: list[str] = []
    size = 0
    with _maybe_guarded(_SIMPLE.get(template, False), seconds):
        for piece in template.generate(**context):
            size += len(piece)
            if size > limit:
                raise TemplateLimit(f"template output is longer than {limit} characters")
            parts.append(piece)
    return "".join(parts)


def evaluate(expression: Any, context: Mapping[str, Any], seconds: float = RENDER_SECONDS) -> Any:
    """A compiled expression (`compile_expression`) evaluated, under the guard when it can loop."""
    with _maybe_guarded(_SIMPLE.get(getattr(expression, "_template", None), False), seconds):  # type: ignore[arg-type]
        return expression(**context)


# What a template may use and still run without the guard: nothing that loops or iterates, filters
# and calls whose cost follows the size of their (bounded) arguments, and no concatenation of more
# than a few parts.
SIMPLE_FILTERS = {
    "abs", "capitalize", "count", "d", "default", "e", "escape", "filesizeformat", "first", "float", "fmt", "int", "last",
    "length", "lower", "replace", "round", "safe", "size", "string", "title", "trim", "truncate", "upper", "wordcount",
}
SIMPLE_CALLS = {
    "cfg", "cfg_at", "cfg_key", "endswith", "get", "has_cfg", "items", "keys", "lower", "package", "startswith", "strip",
    "upper", "values", "version_key", "version_lt",
}
_LOOPING = (nodes.For, nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends, nodes.Block)
_SIMPLE: weakref.WeakKeyDictionary[Template, bool] = weakref.WeakKeyDictionary()


def is_simple(tree: nodes.Template) -> bool:
    for node in tree.find_all(nodes.Node):
        if isinstance(node, _LOOPING):
            return False
        if isinstance(node, nodes.Filter) and node.name not in SIMPLE_FILTERS:
            return False
        if isinstance(node, nodes.Concat) and len(node.nodes) > 32:
            return False
        if isinstance(node, nodes.Call):
            target = node.node
            name = target.attr if isinstance(target, nodes.Getattr) else target.name if isinstance(target, nodes.Name) else None
            if name not in SIMPLE_CALLS:
                return False
    return True


# --- sizes checked before they are made ------------------------------------------------------------

# A format field wider or more precise than MAX_NUMBER allows (five digits or more), or taking its
# width from an argument (`{:{}}`, `%*d`).
_BIG_FORMAT = re.compile(r"\{[^{}]*:[^{}]*?(?:\d{5,}|\{)|%(?:\([^)]*\))?[-#0 +]*(?:\*|\d{5,}|\d*\.(?:\*|\d{5,}))")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0


def _check_result(value: Any) -> Any:
    if isinstance(value, (str, bytes)) and len(value) > MAX_OUTPUT:
        raise TemplateLimit(f"a text of more than {MAX_OUTPUT} characters")
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > MAX_SEQUENCE:
        raise TemplateLimit(f"a sequence of more than {MAX_SEQUENCE} items")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise TemplateLimit(f"a number of more than {MAX_INT_BITS} bits")
    return value


def _check_numbers(args: Any, what: str) -> None:
    for value in args:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise TemplateLimit(f"{what}: {value} is larger than {MAX_NUMBER}")


def _check_format(text: Any, what: str) -> None:
    if isinstance(text, str) and _BIG_FORMAT.search(text):
        raise TemplateLimit(f"{what}: a field width or precision larger than {MAX_NUMBER - 1} (or given as *)")


def _check_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        times = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            times = min(times, count)
        if len(text) + times * (len(new) - len(old)) > MAX_OUTPUT:
            raise TemplateLimit(f"replace would make a text of more than {MAX_OUTPUT} characters")


def _joined(items: Any, separator: Any) -> list[Any]:
    listed = list(items)
    if len(listed) > MAX_SEQUENCE:
        raise TemplateLimit(f"join of more than {MAX_SEQUENCE} items")
    total = sum(len(str(item)) for item in listed) + len(str(separator)) * max(0, len(listed) - 1)
    if total > MAX_OUTPUT:
        raise TemplateLimit(f"join would make a text of more than {MAX_OUTPUT} characters")
    return listed


def _bounded_range(*args: int) -> range:
    result = range(*args)
    if len(result) > MAX_SEQUENCE:
        raise TemplateLimit(f"range of more than {MAX_SEQUENCE} items")
    return result


def _guard_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    passes = getattr(function, "jinja_pass_arg", None)
    skip = 2 if passes is not None else 1  # the context/environment, then the value filtered

    @functools.wraps(function)
    def guarded_filter(*args: Any, **kwargs: Any) -> Any:
        value = args[skip - 1] if len(args) >= skip else None
        if name in _COUNTING_FILTERS:
            _check_numbers([*args[skip:], *kwargs.values()], f"filter {name}")
        if name == "format":
            _check_format(value, "filter format")
        elif name == "replace" and len(args) >= skip + 2:
            _check_replace(value, args[skip], args[skip + 1], args[skip + 2] if len(args) > skip + 2 else kwargs.get("count", -1))
        elif name == "join":
            listed = _joined(value, args[skip] if len(args) > skip else kwargs.get("d", ""))
            args = (*args[: skip - 1], listed, *args[skip:])
        elif name == "indent" and isinstance(value, str):
            width = args[skip] if len(args) > skip else kwargs.get("width", 4)
            pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
            if len(value) + pad * (value.count("\n") + 1) > MAX_OUTPUT:
                raise TemplateLimit(f"indent would make a text of more than {MAX_OUTPUT} characters")
        elif name == "tojson" and isinstance(kwargs.get("indent", args[skip] if len(args) > skip else None), int):
            if (kwargs.get("indent") or args[skip]) > 16:
                raise TemplateLimit("tojson indent larger than 16")
        return _check_result(function(*args, **kwargs))

    return guarded_filter


# Filters and string methods whose numbers say how much they make.
_COUNTING_FILTERS = {"center", "batch", "slice"}
_COUNTING_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}
_REFUSED_METHODS = {"translate", "maketrans"}


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox every template and rule expression of the knowledge base runs in."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)
        self.globals["range"] = _bounded_range
        self.filters = {name: _guard_filter(name, function) for name, function in self.filters.items()}

    def from_string(self, source: Any, globals: Any = None, template_class: Any = None) -> Template:
        cache = self.bytecode_cache
        if isinstance(source, str) and isinstance(cache, TemplateCache):
            # A pack's inline text (a rule's fix, a patch-plan line) is compiled once and kept in the
            # cache folder, as its template files are: a report renders dozens of them.
            bucket = cache.get_bucket(self, "inline-" + _digest(source), None, source)
            if bucket.code is None:
                bucket.code = self.compile(source)
                cache.set_bucket(bucket)
            template = (template_class or self.template_class).from_code(self, bucket.code, self.make_globals(globals), None)
            _SIMPLE[template] = cache.simple(source, lambda: is_simple(self.parse(source)))
            return template
        tree = source if isinstance(source, nodes.Template) else self.parse(source)
        template = super().from_string(tree, globals, template_class)
        _SIMPLE[template] = is_simple(tree)
        return template

    def _load_template(self, name: str, globals: Any) -> Template:
        template = super()._load_template(name, globals)
        if template not in _SIMPLE and self.loader is not None:
            source, _filename, _uptodate = self.loader.get_source(self, name)
            cache = self.bytecode_cache
            if isinstance(cache, TemplateCache):
                _SIMPLE[template] = cache.simple(source, lambda: is_simple(self.parse(source)))
            else:
                _SIMPLE[template] = is_simple(self.parse(source))
        return template

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        ints = isinstance(left, int) and isinstance(right, int) and not isinstance(left, bool) and not isinstance(right, bool)
        if operator == "**" and ints and abs(left) > 1 and right > 0 and right * left.bit_length() > MAX_INT_BITS:
            raise TemplateLimit(f"{left} ** {right} is larger than {MAX_INT_BITS} bits")
        if operator == "*":
            if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateLimit(f"a product larger than {MAX_INT_BITS} bits")
            for seq, times in ((left, right), (right, left)):
                if _size(seq) and isinstance(times, int) and _size(seq) * times > (MAX_OUTPUT if isinstance(seq, str) else MAX_SEQUENCE):
                    raise TemplateLimit(f"repeating a sequence of {_size(seq)} {times} times")
        if operator == "+" and _size(left) and _size(right) and _size(left) + _size(right) > MAX_OUTPUT:
            raise TemplateLimit(f"a concatenation of more than {MAX_OUTPUT} items")
        if operator == "%" and isinstance(left, str):
            _check_format(left, "%")
        return _check_result(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's own signature
        # The sandbox hands out `str.format` wrapped; the method it wraps says whose it is.
        method = getattr(__obj, "__wrapped__", __obj)
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            name = getattr(method, "__name__", "")
            if name in _REFUSED_METHODS:
                raise TemplateLimit(f"str.{name} is not available to templates")
            if name in _COUNTING_METHODS:
                _check_numbers([*args, *kwargs.values()], f"str.{name}")
            if name in ("format", "format_map"):
                _check_format(owner, f"str.{name}")
            elif name == "replace" and len(args) >= 2:
                _check_replace(owner, args[0], args[1], args[2] if len(args) > 2 else -1)
            elif name == "join" and args:
                args = (_joined(args[0], owner), *args[1:])
        return _check_result(super().call(__context, __obj, *args, **kwargs))


class TemplateCache(FileSystemBytecodeCache):
    """Pack templates compiled by an earlier process, and whether each needs the guard, kept in
    `folder`: parsing and compiling the report's templates costs more than a small diagnosis.
    Entries are keyed by the template's source (and the folder by this module's code, see
    `template_cache`), so an edited template or sandbox is compiled again."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder, "%s.jinja")

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError, TypeError):
            bucket.reset()  # a damaged entry is compiled again

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass  # an unwritable cache only costs speed

    def simple(self, source: str, decide: Callable[[], bool]) -> bool:
        path = os.path.join(self.directory, _digest(source) + ".simple")
        try:
            with open(path, encoding="ascii") as handle:
                stored = handle.read()
            if stored in ("0", "1"):
                return stored == "1"
        except (OSError, ValueError):
            pass
        flag = decide()
        store(Path(path), b"1" if flag else b"0")
        return flag


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def template_cache(folder: str | None, options: str) -> TemplateCache | None:
    """The cache for an environment made with `options` (a text that changes when what changes the
    compiled code does), under the cache folder; None without one."""
    if folder is None:
        return None
    with open(__file__, "rb") as handle:
        code = hashlib.sha256(handle.read() + options.encode()).hexdigest()[:16]
    return TemplateCache(os.path.join(folder, f"templates-{code}"))


class PackLoader(BaseLoader):
    """Templates from the packs' `templates/` folders, earlier folders first. A template must be a
    regular file inside its folder: a symbolic link out of the pack (to `/etc/passwd`, a FIFO, a
    device) is refused before anything is read."""

    def __init__(self, folders: list[str]) -> None:
        self.folders = folders

    def get_source(self, environment: Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        pieces = split_template_path(template)
        for folder in self.folders:
            path = os.path.join(folder, *pieces)
            if not os.path.lexists(path):
                continue
            problem = template_file_problem(folder, path)
            if problem is not None:
                raise TemplateLimit(f"template {template}: {problem}")
            with open(path, "rb") as handle:
                source = handle.read().decode("utf-8")
            mtime = os.path.getmtime(path)
            return source, path, lambda path=path, mtime=mtime: os.path.exists(path) and os.path.getmtime(path) == mtime  # type: ignore[misc]
        raise TemplateNotFound(template)


def template_file_problem(folder: str, path: str) -> str | None:
    """Why a file under a pack's folder may not be used, or None."""
    real = os.path.realpath(path)
    if os.path.commonpath([real, os.path.realpath(folder)]) != os.path.realpath(folder):
        return f"a symbolic link out of its pack (to {real})"
    if not os.path.isfile(real):
        return "not a regular file"
    if os.path.getsize(real) > MAX_TEMPLATE_BYTES:
        return f"larger than {MAX_TEMPLATE_BYTES >> 20} MiB"
    return None
