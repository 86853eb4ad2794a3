"""Stage 1 — load: read and validate signatures, rules and templates into an immutable knowledge base."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import regex
from pydantic import BaseModel, ValidationError

from .._version import __version__
from ..base.errors import KnowledgeBaseError, Problem
from ..base.values import plain
from ..base.vocabulary import BASE_FACTS
from . import checks
from .compile import compile_program
from .diskcache import cache_dir, store
from .knowledge import CompiledSignature, KnowledgeBase, LoadedItem, LoadedRule, Origin
from .literals import is_case_insensitive, required_literals
from .models import CatalogItem, Rule, Signature
from .regexes import PatternError, compile_bounded
from .sandbox import template_file_problem
from .yamlio import load_yaml, validation_problems

PACK_FOLDERS = ("signatures", "rules", "collect", "templates", "fixtures")
# Folders of YAML files, one item each, and the model each file holds.
YAML_FOLDERS: dict[str, type[BaseModel]] = {"signatures": Signature, "rules": Rule, "collect": CatalogItem}


def is_checkout(folder: Path) -> bool:
    """A source checkout of rltriage: its pyproject names the project and it holds the knowledge base."""
    try:
        project = (folder / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "rltriage"' in project and (folder / "rules").is_dir() and (folder / "signatures").is_dir()


def enclosing_checkout(start: Path | None = None) -> Path | None:
    """The rltriage checkout that holds `start` (default: the working directory), if any."""
    try:
        folder = (start or Path.cwd()).resolve()
    except OSError:
        return None
    for candidate in (folder, *folder.parents):
        if is_checkout(candidate):
            return candidate
    return None


def builtin_pack() -> Path:
    """The knowledge base the commands use unless told otherwise, in this order:

    1. the checkout the package itself runs from (an editable install, or `engine/` on the path);
    2. the rltriage checkout that holds the working directory, so that a contributor's `rules new`,
       `rules lint`, `rules test` and `diagnose` all read the files being edited, even with a
       regular install;
    3. the copy shipped inside the wheel (`rltriage/_kb`).
    """
    source = Path(__file__).resolve().parents[2]
    if is_checkout(source):
        return source
    checkout = enclosing_checkout()
    if checkout is not None:
        return checkout
    shipped = Path(str(resources.files("rltriage"))) / "_kb"
    if (shipped / "rules").is_dir():
        return shipped
    return source


def pack_origin(pack: Path) -> Literal["installed", "checkout", "pack"]:
    """Where a pack comes from: "checkout" (a source tree of rltriage), "installed" (the copy in the
    wheel) or "pack" (a folder given with --rules-dir)."""
    if is_checkout(pack):
        return "checkout"
    return "installed" if pack.name == "_kb" and pack.parent.name == "rltriage" else "pack"


def describe_packs(packs: Iterable[Path]) -> str:
    """`PATH (checkout)`, `PATH (installed)`, `PATH (pack)`: which knowledge base a command read."""
    return ", ".join(f"{display_path(p)} ({pack_origin(p)})" for p in packs)


def display_path(path: Path) -> str:
    """A path as outputs show it: relative to the working directory when below it, else absolute."""
    return _display(path.resolve()) if path.is_absolute() else _display(path)


def _display(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # pragma: no cover - different drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


def expected_id(folder: Path, path: Path) -> str:
    return ".".join(path.relative_to(folder).with_suffix("").parts)


def _yaml_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and (p.is_file() or p.is_symlink()))


_KIND_OF_FILE = {"signatures": "signature", "rules": "rule", "collect": "collect", "templates": "template"}


def pack_file_problems(packs: list[Path]) -> list[Problem]:
    """Files of a pack that point out of it: a symbolic link to `/etc/passwd` must not become a
    rule, a template or a fixture's text; FIFOs and devices are never opened."""
    problems = []
    for pack in packs:
        if pack == builtin_pack():
            continue  # installed with the code, not written by a stranger
        for folder in PACK_FOLDERS[:4]:  # signatures, rules, collect, templates
            base = pack / folder
            if not base.is_dir():
                continue
            for path in sorted(base.rglob("*")):
                if path.is_dir():
                    inside = os.path.commonpath([os.path.realpath(path), os.path.realpath(base)]) == os.path.realpath(base)
                    problem = None if inside else f"a symbolic link out of its pack (to {os.path.realpath(path)})"
                else:
                    problem = template_file_problem(str(base), str(path))
                if problem is not None:
                    problems.append(Problem(_display(path), 1, 1, "pack-file", f"{_KIND_OF_FILE[folder]} file is {problem}"))
    return problems


def _parse(path: Path, model: type[BaseModel], problems: list[Problem]) -> tuple[Any, Origin] | None:
    display = _display(path)
    tree, found = load_yaml(path, display)
    if found:
        problems.extend(found)
        return None
    origin = Origin(path, display, tree)
    if not isinstance(tree, dict):
        problems.append(Problem(display, 1, 1, "schema", "the file must hold one mapping"))
        return None
    try:
        return model.model_validate(plain(tree)), origin
    except ValidationError as exc:
        problems.extend(validation_problems(exc, tree, display))
        return None


def _compile_signature(sig: Signature, origin: Origin, problems: list[Problem], known_good: bool = False) -> CompiledSignature | None:
    """The signature with its pattern compiled and its groups checked. For a pack `known_good` (its
    exact bytes loaded without a problem before) the pattern is compiled when first used, and the
    group checks, which need it compiled, are not repeated."""
    flags = regex.IGNORECASE if sig.ignore_case else 0
    try:
        compiled = compile_bounded(sig.pattern, f"signature {sig.id}", flags, origin.display, deferred=known_good)
    except PatternError as exc:
        line, col = origin.at("pattern")
        problems.append(Problem(origin.display, line, col, "bad-regex", str(exc)))
        return None
    if not known_good:
        _check_groups(sig, set(compiled.groupindex), origin, problems)
    literals = tuple(sig.literals) if sig.literals else None
    if literals is None:
        derived = required_literals(sig.pattern)
        literals = tuple(derived) if derived else None
    ignore_case = sig.ignore_case or is_case_insensitive(sig.pattern)
    return CompiledSignature(sig, compiled, literals, ignore_case, origin)


def _check_groups(sig: Signature, groups: set[str], origin: Origin, problems: list[Problem]) -> None:
    for name in sig.values:
        if name not in groups:
            line, col = origin.at("values", name)
            problems.append(Problem(origin.display, line, col, "unknown-group", f"values names '{name}', which the pattern has no group for"))
    reserved = set(BASE_FACTS["hit"]) | set(BASE_FACTS["frame_hit"])
    for name in sorted(groups & reserved):
        line, col = origin.at("pattern")
        problems.append(Problem(origin.display, line, col, "reserved-group", f"group name '{name}' is reserved for hit fields"))


# Loaded knowledge bases by their packs' paths, with the newest modification time seen under
# them: a changed pack replaces its old entry; a few sets of packs are kept.
MAX_LOADED = 8
_loaded: OrderedDict[tuple[str, ...], tuple[tuple[str, ...], KnowledgeBase]] = OrderedDict()
_loaded_lock = threading.Lock()


def _stamp(pack: Path) -> str:
    """What a pack's files are now: every file's name, size, modification time and inode, hashed. A
    file changed in place with an older time (a checkout, `cp -p`, an archive unpacked), added or
    removed changes it, so a changed pack replaces its cached knowledge base."""
    digest = hashlib.sha256()
    for folder in PACK_FOLDERS[:4]:
        base = pack / folder
        if base.is_dir():
            for p in sorted(base.rglob("*")):
                try:
                    info = p.stat()
                except OSError:
                    continue
                digest.update(f"{p}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def resolve_packs(rules_dirs: Iterable[str | os.PathLike[str]] = (), *, include_builtin: bool = True) -> list[Path]:
    """The folders a knowledge base is loaded from, in order: `builtin_pack()`, then each extra pack.
    A pack that is the built-in one is not loaded twice; a checkout given as a pack replaces it."""
    packs: list[Path] = [builtin_pack()] if include_builtin else []
    for extra in rules_dirs:
        path = Path(extra)
        if not path.is_dir():
            raise KnowledgeBaseError([Problem(_display(path), 1, 1, "missing-pack", "rules directory does not exist")])
        if any(path.resolve() == pack.resolve() for pack in packs):
            continue  # `--rules-dir .` inside the checkout names the knowledge base already loaded
        if include_builtin and is_checkout(path):
            packs[0] = path  # a checkout given as a pack replaces the shipped knowledge base, not doubles it
            continue
        packs.append(path)
    return packs


def load_knowledge_base(rules_dirs: Iterable[str | os.PathLike[str]] = (), *, include_builtin: bool = True) -> KnowledgeBase:
    """Load the shipped knowledge base plus any extra packs; raises KnowledgeBaseError listing all problems."""
    packs = resolve_packs(rules_dirs, include_builtin=include_builtin)
    key = tuple(str(pack.resolve()) for pack in packs)
    stamp = tuple(_stamp(pack) for pack in packs)
    with _loaded_lock:
        cached = _loaded.get(key)
        if cached is not None and cached[0] == stamp:
            _loaded.move_to_end(key)
            return cached[1]
    kb = _load(packs)
    with _loaded_lock:
        _loaded[key] = (stamp, kb)
        _loaded.move_to_end(key)
        while len(_loaded) > MAX_LOADED:
            _loaded.popitem(last=False)
    return kb


def _files(packs: list[Path]) -> list[tuple[str, Path, Path]]:
    return [(kind, pack / kind, path) for pack in packs for kind in YAML_FOLDERS for path in _yaml_files(pack / kind)]


def _parse_all(packs: list[Path], problems: list[Problem]) -> tuple[list[tuple[str, Path, Path, Any, Origin]], dict[Path, Path | None]]:
    """Every signature and rule file, validated. Validated files are cached as JSON per pack, keyed
    by the exact bytes of every file of the pack (and the version), so the next process skips the
    YAML parsing, and a changed private pack does not make the shipped one be parsed again.

    Also, per pack, the marker file that says these exact bytes loaded without a problem before
    (`_known_good`), or None without a cache."""
    entries: list[tuple[str, Path, Path, Any, Origin]] = []
    markers: dict[Path, Path | None] = {}
    for pack in packs:
        found, markers[pack] = _parse_pack(pack, problems)
        entries.extend(found)
    return entries, markers


def _known_good(marker: Path | None) -> bool:
    return marker is not None and marker.is_file()


def _mark_good(markers: dict[Path, Path | None]) -> None:
    """Remember that these packs loaded without a problem: the next process compiles their
    signature patterns only when a run uses them (most runs use a few of hundreds)."""
    for marker in markers.values():
        if marker is not None and not marker.is_file():
            store(marker, b"")


def _parse_pack(pack: Path, problems: list[Problem]) -> tuple[list[tuple[str, Path, Path, Any, Origin]], Path | None]:
    files = _files([pack])
    digest = hashlib.sha256(__version__.encode())
    for _kind, _folder, path in files:
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        digest.update(str(path).encode() + b"\0" + hashlib.sha256(data).digest())
    folder = cache_dir()
    cache = folder / f"kb-{digest.hexdigest()[:32]}.json" if folder else None
    # What compiles depends on the regex module too.
    digest.update(f"\0regex {regex.__version__}".encode())
    marker = folder / f"kb-{digest.hexdigest()[:32]}.loaded" if folder else None
    if cache is not None and cache.is_file():
        try:
            stored = json.loads(cache.read_text(encoding="utf-8"))
            entries = []
            for (kind, folder, path), item in zip(files, stored, strict=True):
                entries.append((kind, folder, path, YAML_FOLDERS[kind].model_validate(item), Origin(path, _display(path))))
            return entries, marker
        except (OSError, ValueError, TypeError):
            pass  # a stale or damaged cache is just rebuilt
    entries = []
    found: list[Problem] = []
    for kind, folder, path in files:
        parsed = _parse(path, YAML_FOLDERS[kind], found)
        if parsed is not None:
            entries.append((kind, folder, path, parsed[0], parsed[1]))
    problems.extend(found)
    if cache is not None and not found and len(entries) == len(files):
        store(cache, json.dumps([model.model_dump(mode="json", by_alias=True, exclude_unset=True) for *_rest, model, _origin in entries]).encode())
    return entries, marker


def _load(packs: list[Path]) -> KnowledgeBase:
    problems: list[Problem] = pack_file_problems(packs)
    if problems:
        raise KnowledgeBaseError(problems)
    signatures: dict[str, CompiledSignature] = {}
    rules: dict[str, LoadedRule] = {}
    catalog: dict[str, LoadedItem] = {}
    entries, markers = _parse_all(packs, problems)
    known_packs = {pack for pack, marker in markers.items() if _known_good(marker)}
    known_rules: set[str] = set()
    for kind, folder, path, model, origin in entries:
        if kind == "collect":
            checks.check_id(model.id, expected_id(folder, path), origin, problems)
            if model.id in catalog:
                line, col = origin.at("id")
                problems.append(Problem(origin.display, line, col, "duplicate-id", f"id '{model.id}' is already defined in {catalog[model.id].origin.display}"))
                continue
            catalog[model.id] = LoadedItem(model, origin)
        elif kind == "signatures":
            sig = model
            checks.check_id(sig.id, expected_id(folder, path), origin, problems)
            if sig.id in signatures:
                line, col = origin.at("id")
                first = signatures[sig.id].origin.display
                problems.append(Problem(origin.display, line, col, "duplicate-id", f"id '{sig.id}' is already defined in {first}"))
                continue
            compiled = _compile_signature(sig, origin, problems, folder.parent in known_packs)
            if compiled is not None:
                signatures[sig.id] = compiled
        else:
            rule = model
            checks.check_id(rule.id, expected_id(folder, path), origin, problems)
            if rule.id in rules:
                line, col = origin.at("id")
                first = rules[rule.id].origin.display
                problems.append(Problem(origin.display, line, col, "duplicate-id", f"id '{rule.id}' is already defined in {first}"))
                continue
            rules[rule.id] = LoadedRule(rule, origin)
            if folder.parent in known_packs:
                known_rules.add(rule.id)
    template_dirs = tuple(p / "templates" for p in reversed(packs) if (p / "templates").is_dir())
    fixture_dirs = tuple(p / "fixtures" for p in packs if (p / "fixtures").is_dir())
    ordered_rules = tuple(sorted(rules.values(), key=lambda r: r.id))
    kb = KnowledgeBase(signatures, ordered_rules, template_dirs, fixture_dirs, tuple(packs), catalog=catalog)
    problems.extend(checks.run_checks(kb, "load"))
    program = None
    if not problems:
        program = compile_program(kb, problems, frozenset(known_rules))
    if problems:
        raise KnowledgeBaseError(problems)
    _mark_good(markers)
    return KnowledgeBase(signatures, ordered_rules, template_dirs, fixture_dirs, tuple(packs), program, catalog=catalog)
