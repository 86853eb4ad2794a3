"""The compiled matcher of the aggregated scan: one Hyperscan database that says, for every line of a
chunk, which signatures it matches and whether it must take the full path.

Every signature Hyperscan can express (kb/translate.py) reports each line it matches once, at the
line's end. Markers report the lines the translation is not sound for, or that carry more than
signature hits: lines with control characters or other non-ASCII text than tqdm's block elements,
Ray's `[repeated Nx …]` suffix, failure and stack-dump words, config keys, the literals of the
signatures left untranslated. Lines with carriage returns are reported too: the scanner matches
their kept redraws again one by one. A pattern's `^` also allows the launcher prefixes the
normaliser strips (PREFIXES), so that on a line with a prefix the hits are a superset of the
signatures the text after it matches: the scanner matches that text again.

Compiling takes seconds, so the database is built only for inputs large enough to need it and is
kept on disk next to the validated knowledge base, keyed by everything it is built from.

Where the optional compiled module `_linescan` was built (against the Hyperscan library, see
README), the same expressions are compiled once more for it, and it does a chunk's per-line work
without a Python call per match (`LineMatcher.classify`). It cuts Ray prefixes and redraws apart
before its one scan, so the text after a prefix and each kept redraw are scanned as lines of their
own, not scanned again. RLTRIAGE_NATIVE=0 leaves it unused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..inputs.normalize import COLLECTOR_STAMP_PATTERN
from ..kb import translate as translate_module
from ..kb.diskcache import cache_dir, store
from ..kb.knowledge import CompiledSignature
from ..kb.literals import implied
from ..kb.regexes import REGEX_TIMEOUT
from ..kb.translate import Translation, translate

try:  # the optional compiled module (setup.py builds it where the Hyperscan library is installed)
    from . import _linescan as _LINESCAN  # type: ignore[attr-defined]
except ImportError:
    _LINESCAN = None

# Roles of the ids that are not signatures' (signatures have role 0), as bits.
SLOW = 1  # the line takes the full path
CONFIG = 2  # a config key: the full path while the file's config echoes are still being kept
TRIGGER = 4  # a word of the failure trigger: the full path, checking for a failure window
REDRAWN = 8  # carriage returns: match each redraw the normaliser keeps

# Everything inputs/normalize.strip_prefixes can take off the start of a line (Ray's `(actor pid=…)`,
# `[rank3]:`, a collector's RFC 3339 stamp, a Markdown quote's `> `, up to four of them) and more
# (the quote without its `>>>` exception, which Hyperscan cannot say): `^` in a translation stands
# for the line's start or the end of such prefixes.
PREFIXES = (
    r"^(?:\([^)\n]*\)[\t\x0b-\x0d\x1c-\x20]?|\[(?:rank[0-9]+|[A-Za-z_]+[0-9]+)\]:[\t\x0b-\x0d\x1c-\x20]?"
    rf"|{COLLECTOR_STAMP_PATTERN}|> ?){{0,4}}"
)

FORMAT = 3  # bump when what is cached changes meaning

# What LineMatcher.classify returns: the lines left to Python as (end, ids), the hits counted in
# compiled code as (id, count, end of the last), the ends of the deferred lines, and the number of
# newlines in the chunk.
Classified = tuple[list[tuple[int, list[int]]], list[tuple[int, int, int]], list[int], int]

_CASELESS, _MULTILINE = 1, 4  # HS_FLAG_CASELESS and HS_FLAG_MULTILINE, the library's own values
_SUFFIX = r"[^\n]*$"  # report once per line, at its end
# Lines the translations are not sound for: control characters other than tab (carriage returns are
# handled by REDRAWN), and any non-ASCII byte sequence but a block element (E2 96 80-9F).
_UNSOUND_TEXT = (
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]",
    r"[\xc0-\xe1\xe3-\xff]",
    r"^[\x80-\xbf]",
    r"[\x00-\x7f][\x80-\xbf]",
    r"\xe2[\x00-\x95\x97-\xff]",
    r"\xe2$",
    r"\xe2\x96[\x00-\x7f\xa0-\xff]",
    r"\xe2\x96$",
    r"\xe2\x96[\x80-\x9f][\x80-\xbf]",
)


def _escape(text: str) -> str:
    return "".join(chr(byte) if chr(byte).isalnum() or byte == 0x20 else f"\\x{byte:02x}" for byte in text.encode("utf-8"))


def _literal(text: str, caseless: bool) -> str:
    return f"(?i:{_escape(text)})" if caseless else _escape(text)


def _gated(sig: CompiledSignature) -> bool:
    """Whether the literals the prefilter looks for are not implied by the pattern (declared by hand
    and not found in every match): the full path only tries the signature on lines holding one."""
    return sig.model.literals is not None and not implied(sig.model.pattern, list(sig.literals or ()), sig.ignore_case)


@dataclass
class LineMatcher:
    database: Any
    signatures: tuple[CompiledSignature, ...]  # ids 0 … n-1
    exact: tuple[bool, ...]  # False: a hit is confirmed with the signature's pattern
    gated: tuple[bool, ...]  # True: a hit counts only on a line holding one of the signature's literals
    anchored: tuple[bool, ...]  # True: the pattern depends on where the text starts (PREFIXES stand in)
    roles: tuple[int, ...]  # by id: 0 for a signature, else the bits above
    # Inexact only because long bounded repeats were widened, or the translation was cut at a gap
    # (translate's `loosen`): verify() is exact.
    widened: tuple[bool, ...]
    # Ids from here on are literal markers. Every id is reported where its match ends, not at the
    # line's end (the signatures' translations do not run on to it either).
    literal_markers: int
    cuttable: bool = False  # no literal marker can run across the end of a Ray prefix (see _may_span_a_cut)
    # By signature id: for a widened one, the length up to which a line's hit stands as it is
    # (Translation.within; 0 for the others, and for a widened one without such a length).
    within: tuple[int, ...] = ()
    names: tuple[str, ...] = ()  # the signatures' ids, by id
    native: Any = field(default=None, repr=False)  # the same database for `_linescan`, when it is built
    role_bytes: bytes = field(default=b"", repr=False)  # `roles`, one byte an id, for `_linescan`
    within_array: array[int] = field(default_factory=lambda: array("I"), repr=False)  # `within`, for `_linescan`
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _verifiers: dict[int, Any] = field(default_factory=dict, repr=False)
    # For `_linescan`, by signature id: the exact translation of a widened one, once verifier() built it.
    _native_verifiers: list[Any] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.names = tuple(sig.id for sig in self.signatures)
        self.role_bytes = bytes(self.roles)
        self.within = self.within or (0,) * len(self.signatures)
        self.within_array = array("I", self.within)
        self._native_verifiers = [None] * len(self.signatures)

    def classify(self, chunk: bytes, flags: bytes, config_full: bool, defer: bool = False) -> Classified | None:
        """With `_linescan`: the lines of the chunk left to the Python path, as (end, ids), the hits
        counted without it, as (id, count, end of the last line), the ends of the deferred lines and
        the chunk's number of newlines; None without it. `flags`: the NATIVE_* bits of scan.py, one
        byte an id. With `defer` no Python code runs (the GIL is let go for the whole call, so other
        threads run meanwhile): a line a hit of which needs a signature's own pattern is deferred, to
        be classified again without it."""
        if self.native is None:
            return None
        scratch = getattr(self._local, "native", None)
        if scratch is None:
            scratch = self._local.native = self.native.scratch()
        result: Classified = _linescan().classify(
            self.native,
            scratch,
            chunk,
            flags,
            self.role_bytes,
            len(self.signatures),
            self.literal_markers,
            config_full,
            self._native_verifiers,
            self.within_array,
            defer,
            self.cuttable,
        )
        return result

    def scan(self, data: bytes, handler: Any) -> None:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan  # type: ignore[import-not-found]

            scratch = self._local.scratch = hyperscan.Scratch(self.database)
        self.database.scan(data, match_event_handler=handler, scratch=scratch)

    def verifier(self, index: int) -> Any:
        """For a signature whose translation is inexact only because its long bounded repeats were
        widened, the exact translation in a database of its own (built on first use: long bounds
        compile slowly, and most such signatures never match); None for the others."""
        with self._lock:
            if index not in self._verifiers:
                translation = _exact_translation(self.signatures[index])
                database = self._verifiers[index] = None if translation is None else _verifier(translation)
                if self.native is not None and translation is not None and database is not None:
                    # PCRE2 tests one line in a fraction of the time Hyperscan takes to start a scan.
                    self._native_verifiers[index] = _native_pattern(self.signatures[index]) or _native_verifier(translation)
                elif self.native is not None and database is None and not self.exact[index]:
                    sig = self.signatures[index]
                    self._native_verifiers[index] = _native_pattern(sig) or partial(_pattern_confirms, sig)
            return self._verifiers[index]

    def verify(self, index: int, texts: list[bytes]) -> list[bool] | None:
        """Which of the texts (no newlines in them) the signature's exact translation matches; None
        when it has none."""
        database = self.verifier(index)
        if database is None:
            return None
        ends: list[int] = []
        offset = -1
        for text in texts:
            offset += len(text) + 1
            ends.append(offset)
        matched = [False] * len(texts)

        def on_match(_index: int, _start: int, end: int, _flags: int, _context: Any) -> None:
            matched[bisect_left(ends, end)] = True

        scratches = getattr(self._local, "verifiers", None)
        if scratches is None:
            scratches = self._local.verifiers = {}
        scratch = scratches.get(index)
        if scratch is None:
            import hyperscan

            scratch = scratches[index] = hyperscan.Scratch(database)
        database.scan(b"\n".join(texts), match_event_handler=on_match, scratch=scratch)
        return matched


def _widened_only(sig: CompiledSignature) -> bool:
    translation = translate(sig.model.pattern, sig.ignore_case, PREFIXES, widest=1 << 20)
    return translation is not None and translation.exact


def _native_cached(expressions: list[str], flags: list[int], cache: Path | None) -> Any:
    """These expressions compiled for `_linescan`, from the disk cache when it holds them (else kept
    there); None when the library refuses them."""
    native = _linescan()
    if cache is not None and cache.is_file():
        try:
            return native.loads(cache.read_bytes())
        except (OSError, native.HyperscanError):
            pass  # a stale or damaged cache is just rebuilt
    try:
        database = native.compile([e.encode() for e in expressions], flags)
    except native.HyperscanError:
        return None
    if cache is not None:
        store(cache, database.dumps())
    return database


def _within(sig: CompiledSignature) -> int:
    """For a widened signature: the length of line up to which its translation's hit stands."""
    translation = translate(sig.model.pattern, sig.ignore_case, PREFIXES, loosen=True)
    return 0 if translation is None else translation.within


def _exact_translation(sig: CompiledSignature) -> Translation | None:
    """The translation a verifier is built from: exact, with long bounded repeats kept as they are."""
    translation = translate(sig.model.pattern, sig.ignore_case, PREFIXES, widest=1 << 20)
    return translation if translation is not None and translation.exact else None


def _pattern_confirms(sig: CompiledSignature, text: bytes) -> bool | None:
    """For `_linescan`, a hit of a signature no database states exactly (a backreference, a
    lookaround): whether its own pattern is on the text, as the scanner's _confirm decides; None
    when the pattern gives up, and the line takes the Python path, which says so."""
    try:
        return sig.regex.search(text.decode("utf-8"), timeout=REGEX_TIMEOUT) is not None
    except (TimeoutError, UnicodeDecodeError):
        return None


# What Python's regex and PCRE2 read differently: a brace that is not a plain `{n}`, `{n,}` or
# `{n,m}` (PCRE2 10.42 takes `{,n}` as text, the regex module's fuzzy `{e<=1}` too), `\Z` (PCRE2's
# allows a final newline), POSIX classes, and escapes one of them lacks. Such a signature's hits are
# confirmed by Python.
_PCRE2_DIFFERS = re.compile(r"(?<!\\)\{(?!\d+(?:,\d*)?\})|\\[ZzuUNGAaeQE]|\[\[:|\(\?[auLx]")


def _native_pattern(sig: CompiledSignature) -> Any:
    """For `_linescan` built with PCRE2: the signature's own pattern compiled there, to confirm its
    hits without Python; None when the module lacks PCRE2, PCRE2 refuses the pattern, it is written
    in a way the two read differently, or the two disagree on one of the signature's examples."""
    compile_pattern = getattr(_linescan(), "pattern", None)
    if compile_pattern is None or _PCRE2_DIFFERS.search(sig.model.pattern):
        return None
    try:
        pattern = compile_pattern(sig.model.pattern, sig.ignore_case)
    except ValueError:
        return None
    lines = [example.line for example in sig.model.examples.match] + list(sig.model.examples.no_match)
    for line in lines:
        try:
            expected = sig.regex.search(line, timeout=REGEX_TIMEOUT) is not None
        except TimeoutError:
            return None
        if pattern.search(line.encode("utf-8")) is not expected:
            return None
    return pattern


def _native_verifier(translation: Translation) -> Any:
    """The same database as _verifier's, for `_linescan`."""
    flags = _MULTILINE | (_CASELESS if translation.caseless else 0)
    folder = cache_dir()
    key = hashlib.sha256(f"{FORMAT}\0{_linescan().version()}\0{flags}\0{translation.expression}".encode()).hexdigest()[:32]
    return _native_cached([translation.expression], [flags], folder / f"linescan-verify-{key}.hsdb" if folder else None)


def _verifier(translation: Translation) -> Any:
    import hyperscan

    flags = hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_CASELESS if translation.caseless else 0)
    folder = cache_dir()
    key = hashlib.sha256(f"{FORMAT}\0{getattr(hyperscan, '__version__', '')}\0{flags}\0{translation.expression}".encode()).hexdigest()[:32]
    cache = folder / f"verify-{key}.hsdb" if folder else None
    if cache is not None and cache.is_file():
        try:
            return hyperscan.loadb(cache.read_bytes(), hyperscan.HS_MODE_BLOCK)
        except (OSError, hyperscan.error):
            pass
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        database.compile(expressions=[translation.expression.encode()], ids=[0], elements=1, flags=[flags])
    except hyperscan.error:
        return None
    if cache is not None:
        store(cache, hyperscan.dumpb(database))
    return database


def build_matcher(
    signatures: Sequence[CompiledSignature],
    config_keys: Sequence[str],
    slow_words: Sequence[bytes],
    trigger_words: Sequence[str],
    cached_only: bool = False,
) -> LineMatcher | None:
    """The matcher for these signatures, from the disk cache when it is there; None without Hyperscan
    (and, with `cached_only`, when it is not in the cache: it is not compiled then)."""
    try:
        import hyperscan
    except ImportError:
        return None
    digest = hashlib.sha256(f"{FORMAT}\0{getattr(hyperscan, '__version__', '')}\0{PREFIXES}".encode())
    for module in (__file__, translate_module.__file__):  # how the database is built is part of the key
        digest.update(Path(module).read_bytes() if module else b"")
    for sig in signatures:
        digest.update(json.dumps([sig.id, sig.model.pattern, sig.ignore_case, sig.literals, sig.model.literals]).encode())
    digest.update(json.dumps([list(config_keys), [w.decode() for w in slow_words], list(trigger_words)]).encode())
    folder = cache_dir()
    cache = folder / f"scan-{digest.hexdigest()[:32]}.hsdb" if folder else None
    by_id = {sig.id: sig for sig in signatures}
    if cache is not None and cache.is_file():
        try:
            header, _, blob = cache.read_bytes().partition(b"\n")
            meta = json.loads(header)
            matcher = LineMatcher(
                hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK),
                tuple(by_id[i] for i in meta["signatures"]),
                tuple(meta["exact"]),
                tuple(meta["gated"]),
                tuple(meta["anchored"]),
                tuple(meta["roles"]),
                tuple(meta["widened"]),
                meta["literal_markers"],
                meta["cuttable"],
                tuple(meta["within"]),
            )
            matcher.native = _native_database(meta, folder, digest.hexdigest())
            return matcher
        except (OSError, ValueError, KeyError, TypeError, hyperscan.error):
            pass  # a stale or damaged cache is just rebuilt
    if cached_only:
        return None
    matcher, meta = _compile(hyperscan, signatures, config_keys, slow_words, trigger_words)
    if cache is not None:
        store(cache, json.dumps(meta).encode() + b"\n" + hyperscan.dumpb(matcher.database))
    matcher.native = _native_database(meta, folder, digest.hexdigest())
    return matcher


def _linescan() -> Any:
    if _LINESCAN is None:
        raise ImportError("rltriage.pipeline._linescan is not built")
    return _LINESCAN


def native_available() -> bool:
    """Whether the compiled module `_linescan` is built and importable (and not switched off with
    RLTRIAGE_NATIVE=0)."""
    if os.environ.get("RLTRIAGE_NATIVE", "1") == "0":
        return False
    try:
        _linescan()
    except ImportError:
        return False
    return True


def _native_database(meta: dict[str, Any], folder: Path | None, key: str) -> Any:
    """The matcher's expressions compiled for `_linescan` (or loaded from the disk cache); None when
    the module is not built or is switched off, or the library refuses them."""
    if not native_available():
        return None
    digest = hashlib.sha256(f"{key}\0{_linescan().version()}".encode()).hexdigest()[:32]
    return _native_cached(meta["expressions"], meta["flags"], folder / f"linescan-{digest}.hsdb" if folder else None)


def _compile(
    hyperscan: Any, signatures: Sequence[CompiledSignature], config_keys: Sequence[str], slow_words: Sequence[bytes], trigger_words: Sequence[str]
) -> tuple[LineMatcher, dict[str, Any]]:
    translated: list[tuple[CompiledSignature, str, int, bool]] = []
    untranslated: list[CompiledSignature] = []
    for sig in signatures:
        translation = None if not sig.literals else translate(sig.model.pattern, sig.ignore_case, PREFIXES, loosen=True, to_end=False)
        if translation is None:
            untranslated.append(sig)
            continue
        flags = hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_CASELESS if translation.caseless else 0)
        translated.append((sig, translation.expression, flags, translation.exact))
    try:
        return _assemble(hyperscan, translated, untranslated, config_keys, slow_words, trigger_words)
    except hyperscan.error:
        # Some translations Hyperscan still refuses (too large, empty matches): found by halving.
        kept = _compilable(hyperscan, translated)
        untranslated += [item[0] for item in translated if item not in kept]
        return _assemble(hyperscan, kept, untranslated, config_keys, slow_words, trigger_words)


def _assemble(
    hyperscan: Any,
    kept: list[tuple[CompiledSignature, str, int, bool]],
    untranslated: list[CompiledSignature],
    config_keys: Sequence[str],
    slow_words: Sequence[bytes],
    trigger_words: Sequence[str],
) -> tuple[LineMatcher, dict[str, Any]]:
    markers: list[tuple[str, int]] = [(pattern if pattern.endswith("$") else pattern + _SUFFIX, SLOW) for pattern in _UNSOUND_TEXT]
    markers.append((r"\r" + _SUFFIX, REDRAWN))
    # Literals are reported where they end (the scanner finds the line's end): one pattern each
    # compiles in milliseconds, where an alternation with a suffix takes seconds.
    literal_markers = len(kept) + len(markers)
    literals: dict[str, int] = {}
    texts: list[str] = []  # the literals as they read
    for sig in untranslated:
        for literal in sig.literals or ():
            literals[_literal(literal, sig.ignore_case)] = SLOW
            texts.append(literal)
    for raw_word in slow_words:
        literals[_literal(raw_word.decode(), False)] = SLOW
        texts.append(raw_word.decode())
    for key in config_keys:
        literals.setdefault(_literal(key, False), CONFIG)
        texts.append(key)
    for word in trigger_words:
        literals[_literal(word, False)] = literals.get(_literal(word, False), 0) | SLOW | TRIGGER
        texts.append(word)
    cuttable = not any(_may_span_a_cut(text) for text in texts)
    markers += sorted(literals.items())
    expressions = [expression for _sig, expression, _flags, _exact in kept] + [pattern for pattern, _role in markers]
    flags = [f for _sig, _expression, f, _exact in kept] + [hyperscan.HS_FLAG_MULTILINE] * len(markers)
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(expressions=[e.encode() for e in expressions], ids=list(range(len(expressions))), elements=len(expressions), flags=flags)
    exact = [item[3] for item in kept]
    gated = [_gated(item[0]) for item in kept]
    anchored = [PREFIXES in item[1] for item in kept]
    roles = [0] * len(kept) + [role for _pattern, role in markers]
    widened = [not item[3] and _widened_only(item[0]) for item in kept]
    within = [_within(item[0]) if wide else 0 for item, wide in zip(kept, widened, strict=True)]
    meta = {
        "signatures": [item[0].id for item in kept], "exact": exact, "gated": gated, "anchored": anchored, "roles": roles,
        "widened": widened, "literal_markers": literal_markers, "cuttable": cuttable, "within": within, "expressions": expressions, "flags": flags,
    }
    matcher = LineMatcher(
        database, tuple(item[0] for item in kept), tuple(exact), tuple(gated), tuple(anchored), tuple(roles), tuple(widened), literal_markers, cuttable, tuple(within)
    )
    return matcher, meta


# What may end a Ray prefix (`…)`, then one optional blank) and what never starts the text after it
# (_linescan cuts a line there only when no other prefix follows).
_BLANKS = " \t\n\r\x0b\x0c"
_PREFIX_OPENERS = "([>"


def _may_span_a_cut(literal: str) -> bool:
    """Whether the literal could run across the end of a Ray prefix: its head ending the prefix
    (`)`, `)` and a blank, or a lone blank after the `)`), its tail starting the text after it.
    `_linescan` scans a Ray-prefixed line as two segments, the prefix and the text after it, only
    when no literal marker can: such a literal would be on neither."""
    for cut in range(1, len(literal)):
        head, tail = literal[:cut], literal[cut:]
        if tail[0] in _PREFIX_OPENERS:
            continue
        if head.endswith(")") or (head[-1] in _BLANKS and (len(head) == 1 or head[-2] == ")")):
            return True
    return False


def _compilable(hyperscan: Any, items: list[Any]) -> list[Any]:
    def compiles(group: list[Any]) -> bool:
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        try:
            database.compile(
                expressions=[item[1].encode() for item in group], ids=list(range(len(group))), elements=len(group), flags=[item[2] for item in group]
            )
        except hyperscan.error:
            return False
        return True

    def keep(group: list[Any]) -> list[Any]:
        if not group or compiles(group):
            return group
        if len(group) == 1:
            return []
        middle = len(group) // 2
        return keep(group[:middle]) + keep(group[middle:])

    return keep(items)
