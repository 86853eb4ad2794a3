"""Secrets out of every output: reports get pasted into public issues.

Each secret shape below finds the secret's span in a text (with the context that identifies it, such
as `Authorization: Bearer` or a variable's name); redaction replaces every span at once, so shapes
cannot hide one another and redacting twice changes nothing. Every pattern is linear in the text's
length: unbounded repeats only where nothing after them can make the engine back up.

Text is cut in several places (evidence kept by the scanner, failure context, `explain`, `watch`'s
status line). A cut must not leave half a secret that no shape recognises any more, so `cut` moves
the cut point before any secret it would split, and `continued` drops the beginning of a line piece
when a secret started in the piece before it. Both work on the raw text and keep everything else,
so `--no-redact` output only loses what a cut would have split.

`finish_model` is the last step of every result: redaction of every string (unless turned off) and
`printable` text (always).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from ..base.text import printable

MASK = "[REDACTED]"
CUT_MARGIN = 8192  # text past a cut point that is looked at to see whether a secret crosses it
CONTEXT = 1024  # text before a line piece that can hold the start of a secret running into it

# Where a secret starts: (whole match start, secret start, secret end).
Span = tuple[int, int, int]


@dataclass(frozen=True)
class Shape:
    """One kind of secret: `pattern`'s group `s` is the secret, the rest of the match its context.

    A `named` shape matches a name and its `=` or `:` only; when the name says it holds a secret
    (`sensitive_name`), the value that follows is the secret. `hints` are lower-case words one of
    which any text holding the shape contains: texts without them are not searched at all.
    """

    name: str
    example: str  # a planted example, for the docs and the tests
    pattern: re.Pattern[str]
    hints: tuple[str, ...]
    named: bool = False


_SENSITIVE_WORDS = {"token", "secret", "password", "passwd", "pwd", "passphrase", "credential", "credentials"}
_SENSITIVE_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("account", "key")}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAME_HINTS = ("token", "secret", "passw", "pwd", "passphrase", "credential", "key")


def sensitive_name(name: str) -> bool:
    """Whether a variable, config key or option name says it holds a secret: KEY, TOKEN, SECRET or
    PASSWORD (and kin) as a whole word of it — `HF_TOKEN`, `api-key`, `AZURE_OPENAI_KEY`, or at the
    end of a camelCase name, `dbPassword` — but not `max_tokens`, `TOKENIZERS_PARALLELISM`,
    `PasswordAuthentication` or a bare `key`."""
    words = [w for w in re.split(r"[_.\-]+", name.strip("\"'")) if w]
    if not words:
        return False
    parts = [w.lower() for w in words]
    if any(p in _SENSITIVE_WORDS for p in parts) or any(pair in _SENSITIVE_PAIRS for pair in zip(parts, parts[1:], strict=False)):
        return True
    if len(parts) > 1 and parts[-1] in ("key", "apikey"):
        return True
    # camelCase counts at the end of the name only: `dbPassword`, `apiKey`, `clientSecret` hold
    # secrets, `PasswordAuthentication` (an ssh option, yes/no) does not.
    camel = [c.lower() for c in _CAMEL.sub("_", words[-1]).split("_") if c]
    if len(camel) < 2:
        return False
    return camel[-1] in _SENSITIVE_WORDS or tuple(camel[-2:]) in _SENSITIVE_PAIRS or camel[-1] == "key"


# The value after a secret's name: quoted (spaces and all, to the closing quote or the end of the
# line), or up to the next space, quote, comma, semicolon or closing bracket.
_VALUE = re.compile(r"""\[REDACTED\]|"(?P<s1>[^"\n]*)"?|'(?P<s2>[^'\n]*)'?|(?P<s3>[^\s"',;}\]]+)""")
_OPTION_VALUE = re.compile(r"""\[REDACTED\]|"(?P<s1>[^"\n]*)"?|'(?P<s2>[^'\n]*)'?|(?!-)(?P<s3>\S+)""")

SHAPES: tuple[Shape, ...] = (
    Shape(
        "private key block",
        "-----BEGIN RSA PRIVATE KEY-----MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun-----END RSA PRIVATE KEY-----",
        re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?P<s>.*?)(?=-----END [A-Z ]{0,40}PRIVATE KEY-----|\Z)", re.S),
        ("-----begin",),
    ),
    Shape(
        "private key block without its start",
        "u1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0zz-----END PRIVATE KEY-----",
        re.compile(r"(?<![A-Za-z0-9+/=])(?P<s>[A-Za-z0-9+/=]{40,})(?=\s{0,4}-----END [A-Z ]{0,40}PRIVATE KEY-----)"),
        ("-----end",),
    ),
    Shape("Hugging Face token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", re.compile(r"(?<![A-Za-z0-9])(?P<s>(?:hf|api_org)_[A-Za-z0-9]{30,})"), ("hf_", "api_org_")),
    Shape(
        "AWS access key id",
        "AKIAIOSFODNN7EXAMPLE",
        re.compile(r"(?<![A-Z0-9])(?P<s>(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[0-9A-Z]{16})(?![0-9A-Z])"),
        ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "abia", "acca"),
    ),
    Shape("Google API key", "AIzaSyA1234567890abcdefghijklmnopqrstuv", re.compile(r"(?P<s>AIza[0-9A-Za-z_\-]{35})"), ("aiza",)),
    Shape("Google OAuth token", "ya29.a0AfH6SMBx1234567890abcdefghij", re.compile(r"(?P<s>ya29\.[0-9A-Za-z_\-]{20,})"), ("ya29.",)),
    Shape(
        "OpenAI / Anthropic key",
        "sk-proj-Abcdefghijklmnopqrstuvwxyz012345",
        re.compile(r"(?<![\w-])(?P<s>sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,})"),
        ("sk-",),
    ),
    Shape("GitHub token", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", re.compile(r"(?<![A-Za-z0-9])(?P<s>gh[pousr]_[A-Za-z0-9]{30,})"), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    Shape(
        "GitHub fine-grained token",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        re.compile(r"(?<![A-Za-z0-9])(?P<s>github_pat_[A-Za-z0-9_]{22,})"),
        ("github_pat_",),
    ),
    Shape("Slack token", "xoxb-1234567890-abcdefghijkl", re.compile(r"(?<![A-Za-z0-9])(?P<s>xox[abposre]-[A-Za-z0-9\-]{10,})"), ("xox",)),
    Shape("Slack app token", "xapp-1-A0123456789-1234567890123-abcdef0123456789", re.compile(r"(?<![A-Za-z0-9])(?P<s>xapp-\d{1,4}-[A-Za-z0-9\-]{10,})"), ("xapp-",)),
    Shape(
        "Slack webhook URL",
        "https://hooks.slack.com/services/T0000ABCD/B0000EFGH/AbCdEfGhIjKlMnOpQrStUvWx",
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/\-]+)"),
        ("hooks.slack.com/",),
    ),
    Shape(
        "JSON Web Token",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ",
        re.compile(r"(?<![\w-])(?P<s>eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*)"),
        ("eyj",),
    ),
    Shape(
        "Azure storage account key",
        "AccountKey=q2HFaEbkKpZ8fSKM3l1sWv9TQy3uFzR8cRzE0xZXbY4uLm7kT6c1aPeIoU5sNbVq==",
        re.compile(r"(?i)AccountKey=(?P<s>[A-Za-z0-9+/=]{20,})"),
        ("accountkey=",),
    ),
    Shape(
        "Azure SAS signature",
        "https://x.blob.core.windows.net/c?sv=2022&sig=AbCdEfGh1234%2Bxyz%3D",
        re.compile(r"(?i)[?&;]sig=(?P<s>[A-Za-z0-9%+/=]{10,})"),
        ("sig=",),
    ),
    Shape(
        "Authorization header",
        "Authorization: Bearer AbCdEf0123456789xyz",
        # A scheme, or a value that looks like a credential: `authorization: server message` is prose.
        re.compile(r"(?i)\bauthorization[\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?(?:(?:bearer|basic|token|digest)[ \t]{1,8}|(?=[A-Za-z0-9._~+/=\-]{16}))(?P<s>[^\s\"',;]+)"),
        ("authorization",),
    ),
    Shape(
        "Bearer or Basic credentials",
        "bearer dXNlcjpzM2NyZXQtYmFzaWMtcGFzcw==",
        re.compile(r"(?i)\b(?:bearer|basic)[ \t]{1,8}(?P<s>[A-Za-z0-9._~+/\-]{16,}=*)"),
        ("bearer", "basic"),
    ),
    Shape(
        "password in a URL",
        "https://trainer:s3cr3t-pa55@judge.internal/v1",
        re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/\s:@]{1,256}:(?P<s>[^\s/]{1,256})@"),
        ("://",),
    ),
    Shape(
        "W&B API key",
        "wandb: logging in with 0123456789abcdef0123456789abcdef01234567",
        re.compile(r"(?i)\bwandb\b[^\n]{0,60}?(?<![0-9a-f])(?P<s>[0-9a-f]{40})(?![0-9a-f])"),
        ("wandb",),
    ),
    Shape("W&B local key", "local-0123456789abcdef0123456789abcdef01234567", re.compile(r"(?i)\blocal-(?P<s>[0-9a-f]{40})(?![0-9a-f])"), ("local-",)),
    Shape(
        "variable or config key named like a secret",
        'AZURE_OPENAI_KEY="correct horse battery staple"',
        re.compile(r"(?<![\w.\-])(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,127})(?P=q)[ \t]{0,8}[=:][ \t]{0,8}"),
        _NAME_HINTS,
        named=True,
    ),
    Shape(
        "command-line option named like a secret",
        "--access-key AbCdEf0123456789",
        re.compile(r"(?<![\w\-])--?(?P<name>[A-Za-z][A-Za-z0-9_\-]{0,127})(?:=|[ \t]{1,8})"),
        _NAME_HINTS,
        named=True,
    ),
)


_HINTS = tuple(sorted({hint for shape in SHAPES for hint in shape.hints}))


def spans(text: str) -> Iterator[Span]:
    """Every secret in `text`: (start of its match, start and end of the secret itself)."""
    lowered = text.lower()
    present = {hint for hint in _HINTS if hint in lowered}
    if not present:
        return
    for shape in SHAPES:
        if present.isdisjoint(shape.hints):
            continue
        position = 0
        while True:
            match = shape.pattern.search(text, position)
            if match is None:
                break
            position = match.end() if match.end() > match.start() else match.start() + 1
            if not shape.named:
                start, end = match.span("s")
                if end > start:
                    yield match.start(), start, end
                continue
            if not sensitive_name(match.group("name")):
                continue  # the value may hold a name of its own: go on right after `=`
            value = (_OPTION_VALUE if shape.name.startswith("command-line") else _VALUE).match(text, match.end())
            if value is None:
                continue
            group = next((g for g in ("s1", "s2", "s3") if value.group(g)), None)
            if group is not None:
                start, end = value.span(group)
                yield match.start(), start, end
            position = max(position, value.end())  # a value is read once, however long


def redact(text: str) -> str:
    """`text` with every secret replaced by [REDACTED]."""
    found = sorted((start, end) for _m, start, end in spans(text))
    if not found:
        return text
    out: list[str] = []
    at = 0
    for start, end in found:
        if end <= at:
            continue  # inside a secret already masked
        if start < at:
            start = at
        else:
            out.append(text[at:start])
        out.append(MASK)
        at = end
    out.append(text[at:])
    return "".join(out).replace(MASK + MASK, MASK)


_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
_KEY_END = re.compile(r"-----END [A-Z ]{0,40}PRIVATE KEY-----")


def mask_key_blocks(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Numbered lines (consecutive numbers form one stretch) with every line inside a private key
    block replaced by [REDACTED]. A key printed over many lines leaves body lines that no shape
    recognises alone; this sees the block: from a BEGIN line to its END line, from the start of a
    stretch to an END line when the stretch began inside a key, and from a BEGIN line to the end of
    a stretch that stops inside one. The BEGIN and END lines themselves are left to `redact`."""
    if not any("PRIVATE KEY-----" in text for _n, text in lines):
        return lines
    out: list[tuple[int, str]] = []
    stretch: list[tuple[int, str]] = []

    def flush() -> None:
        inside: bool | None = None  # None: not known yet (the stretch may have begun inside a key)
        pending: list[int] = []  # body lines before the first edge, masked if an END comes first
        for index, (number, text) in enumerate(stretch):
            begin, end = _KEY_BEGIN.search(text), _KEY_END.search(text)
            if end is not None and (begin is None or end.start() > begin.start()):
                if inside is None:
                    for at in pending:
                        stretch[at] = (stretch[at][0], MASK)
                inside = False
            elif begin is not None:
                inside = True
            elif inside:
                stretch[index] = (number, MASK)
            elif inside is None:
                pending.append(index)
        out.extend(stretch)
        stretch.clear()

    for number, text in lines:
        if stretch and number != stretch[-1][0] + 1:
            flush()
        stretch.append((number, text))
    flush()
    return out


def cut(text: str, limit: int) -> str:
    """`text[:limit]`, the cut moved before any secret (with its context) it would split."""
    if len(text) <= limit:
        return text
    crossing = [(match, end) for match, _start, end in spans(text[: limit + CUT_MARGIN]) if match < limit < end]
    end = limit
    changed = True
    while changed:
        changed = False
        for match, stop in crossing:
            if match < end < stop:
                end, changed = match, True
    return text[:end]


def cut_bytes(raw: bytes, limit: int) -> str:
    """`raw` decoded and cut like `cut`, without decoding more of it than the cut can need."""
    if len(raw) <= limit:
        return raw.decode("utf-8", "replace")
    return cut(raw[: limit + CUT_MARGIN].decode("utf-8", "replace"), limit)


def continued(before: str, text: str) -> str:
    """`text`, the part of a line that follows `before` (the end of the piece before it), without
    the rest of a secret that started in `before`."""
    if not before:
        return text
    joined = before + text[: CUT_MARGIN]
    edge = len(before)
    drop = 0
    for match, _start, end in spans(joined):
        if match < edge < end:
            drop = max(drop, end - edge)
    return text[drop:]


def redact_path(path: str) -> str:
    """A file or folder path redacted one name at a time: a secret in a folder's name (a value runs
    to the end of a name, never past a `/`) leaves the names after it readable."""
    return "/".join(_redact_name(part) for part in path.split("/"))


@functools.lru_cache(maxsize=4096)
def _redact_name(name: str) -> str:
    # The folders of a run's 100,000 files are the same few names: each is redacted once.
    return redact(name)


_PATH_KEYS = frozenset({"path", "inputs", "run"})  # result fields that hold a file or folder path


def _walk(value: Any, redacting: bool, key: str = "") -> Any:
    if isinstance(value, str):
        if redacting:
            value = redact_path(value) if key in _PATH_KEYS else redact(value)
        return printable(value, multiline=key == "fix")
    if isinstance(value, list):
        return [_walk(v, redacting, key) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, redacting, k) for k, v in value.items()}
    return value


Model = TypeVar("Model", bound=BaseModel)


def redact_model(model: Model) -> Model:
    """A copy of a result model with every string redacted."""
    return finish_model(model, True)


def finish_model(model: Model, redacting: bool = True) -> Model:
    """A copy of a result model with every string redacted (unless `redacting` is off) and printable.

    Long lists of models (a diagnosis's inputs, one per file) are walked item by item, and an item
    the walk leaves unchanged is kept as it is: a folder of 100,000 files is not copied three times.
    """
    lists = {
        name: value
        for name, value in model
        if isinstance(value, list) and len(value) > _ITEMWISE and all(isinstance(item, BaseModel) for item in value)
    }
    data = _walk(model.model_dump(mode="json", exclude=set(lists)), redacting)
    for name, items in lists.items():
        data[name] = [_finish_item(item, redacting) for item in items]
    return type(model).model_validate(data)


_ITEMWISE = 64


def _finish_item(item: BaseModel, redacting: bool) -> Any:
    dumped = item.model_dump(mode="json")
    walked = _walk(dumped, redacting)
    return item if walked == dumped else walked
