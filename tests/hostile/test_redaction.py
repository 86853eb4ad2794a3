"""Round 2: redaction on every path. Every secret shape docs/security.md lists is planted at a line's
start and end, across every cut (the scanner's evidence cut, failure context, `explain`, `verify`,
`watch`) and across the 1 MiB piece boundary of a long line, and in file and folder names; no part
of it may reach any output."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rltriage import KnowledgeBase
from rltriage.base.vocabulary import InputKind
from rltriage.pipeline.redact import SHAPES, Shape, cut, redact, spans
from rltriage.pipeline.scan import CHUNK, MAX_LINE, MAX_TEXT, FileScan, failure_template, scanner_for

from .bounds import cli, in_child, report

MARKER = "[rltriage] stage=first_generation_started step=0"
GOOD = f"starting\n{MARKER}\ndone\n"
WINDOW = 8  # a secret leaks when any 8 characters of it survive


def secret_of(shape: Shape) -> tuple[str, int, int]:
    """The secret part of a shape's example, and where its match and secret end lie in it."""
    (match, start, end), *_ = list(spans(shape.example))
    return shape.example[start:end], match, end


def leaked(text: str, secret: str) -> str | None:
    return next((secret[i : i + WINDOW] for i in range(len(secret) - WINDOW + 1) if secret[i : i + WINDOW] in text), None)


def kept_texts(scan: FileScan) -> list[str]:
    """Every text a scan keeps for the report: evidence of hits, unexplained lines and their
    templates, config echoes, failures with their context and frames."""
    texts = []
    for tally in scan.tallies.values():
        texts += [r.text for r in (tally.first, *tally.samples, tally.last) if r is not None]
        texts += [str(v) for r in (tally.first, tally.last) if r is not None for v in r.values.values()]
    for item in scan.unexplained.values():
        texts += [item.text, item.template]
    texts += [echo.text for echo in scan.config] + [echo.value for echo in scan.config]
    for failure in scan.failures:
        texts += [failure.text, failure.message, failure.detail, *(t for _n, t in failure.detail_lines), *(t for _n, t in failure.context_lines)]
        texts += [f.log_text for f in failure.frames] + [f.code_text for f in failure.frames]
    return texts


def assert_nothing_leaks(scan: FileScan, secret: str) -> None:
    for text in kept_texts(scan):
        found = leaked(redact(text), secret)
        assert found is None, f"{found!r} of the secret survives in {text[:120]!r}…"


def test_every_shape_is_documented_and_redacted() -> None:
    documented = Path(__file__).resolve().parents[2].joinpath("docs", "security.md").read_text(encoding="utf-8")
    for shape in SHAPES:
        secret, _match, _end = secret_of(shape)
        assert len(secret) >= WINDOW, shape.name
        assert f"| {shape.name} |" in documented, f"{shape.name} missing from docs/security.md"
        for text in (shape.example, f"x {shape.example}", f"{shape.example} y", f"a line; {shape.example}; and more"):
            out = redact(text)
            assert "[REDACTED]" in out and leaked(out, secret) is None, (shape.name, out)
            assert redact(out) == out  # redacting twice changes nothing


def test_names_that_are_not_secrets_keep_their_values() -> None:
    text = (
        "max_tokens=512 TOKENIZERS_PARALLELISM=false key=value num_key_value_heads=8 --max-new-tokens 64 tokenizer: Qwen"
        " ssh -o PasswordAuthentication=no host secretName: reward-judge"
        " pull access denied, may require authorization: server message: insufficient_scope"
    )
    assert redact(text) == text
    for named in ("Authorization: AbCdEf0123456789xyz", "dbPassword: hunter2hunter2", "apiKey=abcdef123456", "clientSecret: abcdef123456", "AZURE_OPENAI_KEY=abcdef123456"):
        assert redact(named).endswith("[REDACTED]"), named


def scan_line(kb: KnowledgeBase, line: str) -> FileScan:
    return scanner_for(kb).scan("planted.log", InputKind.driver_log, io.BytesIO(line.encode()))


# Lines the scanner keeps in every way it keeps lines: a signature hit, an unexplained failure line
# and an exception with its message. `{}` is where the padding and the secret go.
CARRIERS = (f"{{}} {MARKER}\n", "ERROR unexplained {} trailing words\n", "RuntimeError: {} went wrong\n")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), where=st.floats(0, 1, exclude_max=True), carrier=st.sampled_from(CARRIERS), edge=st.sampled_from(["start", "end", "cut"]))
def test_secret_at_line_start_end_and_across_the_evidence_cut(kb: KnowledgeBase, shape: Shape, where: float, carrier: str, edge: str) -> None:
    secret, match, end = secret_of(shape)
    head = carrier.split("{}")[0]
    if edge == "start":
        planted = shape.example
    elif edge == "end":
        planted = "x " * 40 + shape.example
    else:
        # The cut at MAX_TEXT characters falls somewhere from the start of the match (its context,
        # such as `Authorization: Bearer`) to the end of the secret.
        inside = match + int(where * (end - match))
        planted = " " * (MAX_TEXT - len(head) - inside) + shape.example
    assert_nothing_leaks(scan_line(kb, carrier.format(planted)), secret)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), where=st.floats(0, 1, exclude_max=True))
def test_secret_across_the_piece_boundary_of_a_long_line(kb: KnowledgeBase, shape: Shape, where: float) -> None:
    secret, match, end = secret_of(shape)
    inside = match + int(where * (end - match))
    head = f"{MARKER} "
    # The scanner reads CHUNK bytes at a time and splits a line once what it holds of it is longer
    # than MAX_LINE: the first piece ends at the first multiple of CHUNK past MAX_LINE.
    piece = (MAX_LINE // CHUNK + 1) * CHUNK
    filler = "." * (piece - len(head) - inside - 1) + " "
    # Both pieces of the line are evidence: each holds the marker, an unexplained ERROR and an exception.
    line = head + filler + shape.example + f" {MARKER} ERROR there RuntimeError: boom\n"
    assert line.encode()[:piece].decode().endswith(shape.example[:inside])  # the boundary is inside the secret
    scan = scan_line(kb, line)
    assert scan.lines == 1 and scan.warnings == ["line 1 is longer than 1 MiB; matched in pieces"]
    assert_nothing_leaks(scan, secret)


def test_cut_keeps_everything_but_a_split_secret() -> None:
    text = "a" * 100 + " hf_" + "B" * 40 + " tail"
    assert cut(text, 50) == "a" * 50
    assert cut(text, 110) == "a" * 100 + " "  # the token is left out whole, not cut
    assert cut(text, 1000) == text
    template = failure_template("ERROR https://user:hunter2hunter2@host/x failed 42")
    assert "[REDACTED]" in template and "hunter2" not in template


def plant_run(root: Path) -> dict[str, str]:
    """A run whose evidence carries planted secrets in every output path; returns name -> secret."""
    hf = "hf_" + "Q" * 36
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    url = "https://trainer:pa55-w0rd-pa55@judge.internal/v1"
    key = "AZURE_OPENAI_KEY=azurekey0123456789abcdef"
    secrets = {"hf": hf[3:], "jwt": jwt[4:], "url password": "pa55-w0rd-pa55", "azure": "azurekey0123456789abcdef", "folder": "github_pat_" + "F" * 30}
    run = root / f"run-GITHUB_TOKEN={secrets['folder']}"
    run.mkdir(parents=True)
    lines = [
        "starting",
        # The secret crosses explain's 160-character cut and verify's 200-character one.
        f"{' ' * 140}{hf} {MARKER}",
        f"{' ' * 180}{jwt} [rltriage] stage=first_generation_finished step=0",
        f"ERROR unexplained {url} again",  # masked into a template: secrets go first
        f"RuntimeError: {key} could not connect",
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 3, in <module>',
        f"    connect('{url}')",
        f"ValueError: token {jwt} rejected",
    ]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    (run / "core.bin").write_bytes(b"\x00" * 64)  # a warning naming a path with the folder's secret
    return secrets


def assert_clean(outputs: dict[str, str], secrets: dict[str, str]) -> None:
    for where, text in outputs.items():
        for name, secret in secrets.items():
            found = leaked(text, secret)
            assert found is None, f"{name} leaks in {where}: {found!r}"


def test_every_output_path_is_redacted(tmp_path: Path) -> None:
    secrets = plant_run(tmp_path)
    run = next(tmp_path.iterdir())
    outputs: dict[str, str] = {}
    for fmt in ("text", "markdown", "json", "html"):
        outcome = cli(["diagnose", "--format", fmt, str(run)]).check(0, 30)
        outputs[fmt] = outcome.stdout
        outputs[f"{fmt} stderr"] = outcome.stderr
    document = json.loads(outputs["json"])
    assert document["failures"] and "[REDACTED]" in json.dumps(document["failures"])
    assert any("[REDACTED]" in u["template"] for u in document["unexplained"])
    assert [w["path"] for w in document["warnings"]] == [f"{tmp_path}/run-GITHUB_TOKEN=[REDACTED]/core.bin"]
    outcome = cli(["explain", str(run)]).check(0, 30)
    assert "evidence" in outcome.stdout
    outputs["explain"] = outcome.stdout
    outcome = cli(["verify", "--format", "json", str(run)]).check(1, 30)
    outputs["verify"], outputs["verify stderr"] = outcome.stdout, outcome.stderr
    assert json.loads(outcome.stdout)["inputs"] == [f"{tmp_path}/run-GITHUB_TOKEN=[REDACTED]/train.log"]
    results = tmp_path / "results.jsonl"
    outcome = cli(["batch", "-o", str(results), str(tmp_path)]).check(0, 30)
    outputs["batch"], outputs["batch summary"] = results.read_text(), outcome.stdout
    assert json.loads(results.read_text().splitlines()[0])["run"] == f"{tmp_path}/run-GITHUB_TOKEN=[REDACTED]"
    report("every output path", outcome)
    assert_clean(outputs, secrets)
    raw = cli(["diagnose", "--format", "json", "--no-redact", str(run)]).check(0, 30).stdout
    assert secrets["azure"] in raw  # and the flag still turns it off


def test_watch_status_lines_are_redacted(tmp_path: Path) -> None:
    secret = "hf_" + "W" * 36
    run = tmp_path / f"HF_TOKEN={secret}"
    run.mkdir()
    log = run / "train.log"
    log.write_text("starting\n")

    def progress() -> None:
        time.sleep(1.0)
        with open(log, "a") as handle:
            handle.write(f"{'x' * 100} {secret} {{'loss': 0.1}}\n")  # crosses the 120-character cut

    writer = threading.Thread(target=progress)
    writer.start()
    try:
        outcome = cli(["watch", "--stall-after", "2", "--poll", "0.2", "--format", "json", str(run)], seconds=40)
    finally:
        writer.join()
    outcome.check(4, 40)
    assert "rltriage watch: watching 1 file(s) under " + str(tmp_path / "HF_TOKEN=[REDACTED]") in outcome.stderr
    assert "last progress: " in outcome.stderr
    assert leaked(outcome.stderr + outcome.stdout, secret[3:]) is None


def test_file_names_cannot_forge_lines_or_drive_the_terminal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "good.log").write_text(GOOD)
    (run / "x.log\nrltriage: warning: all clear.log").write_bytes(b"\x00" * 64)  # a binary file: a warning names it
    (run / "ansi.log").write_bytes(f"\x1bc\x1b(0\x1b]0;owned\x07\x9b31m {MARKER} ERROR \x1b[31mred\x1b[0m\n".encode())
    for fmt in ("text", "markdown"):
        outcome = in_child(lambda fmt=fmt: _diagnose(run, fmt), seconds=30).check(0, 30)
        assert "\x1b" not in outcome.stdout and "\x1b" not in outcome.stderr and "\x9b" not in outcome.stdout
        assert outcome.warnings == [f"rltriage: warning: {run}/x.log?rltriage: warning: all clear.log: skipped: binary content"]
        assert f"{run}/good.log" in outcome.stdout


def _diagnose(run: Path, fmt: str) -> int:
    from rltriage.cli import main

    main.main(args=["diagnose", "--format", fmt, str(run)], prog_name="rltriage", standalone_mode=True)
    return 0


def test_private_key_printed_over_many_lines_after_an_exception(tmp_path: Path) -> None:
    """A key block printed after (and before) an exception line is failure context line by line: no
    body line may reach the failure evidence, in any format."""
    import base64
    import random

    body = base64.b64encode(random.Random(16).randbytes(900)).decode()
    key_lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    block = ["-----BEGIN RSA PRIVATE KEY-----", *key_lines, "-----END RSA PRIVATE KEY-----"]
    log = tmp_path / "train.log"
    log.write_text(
        "\n".join(
            [
                "starting",
                MARKER,
                # The key before the exception: its failure context starts inside the block.
                *block,
                "ValueError: could not deserialize key data",
                "Traceback (most recent call last):",
                '  File "/app/train.py", line 3, in <module>',
                "    load_key()",
                "ValueError: could not deserialize key data:",
                *block,  # and after it
                "done",
            ]
        )
        + "\n"
    )
    outputs = {}
    for fmt in ("text", "markdown", "json", "html"):
        outcome = cli(["diagnose", "--format", fmt, str(log)]).check(0, 30)
        outputs[fmt] = outcome.stdout
    outputs["explain"] = cli(["explain", str(log)]).check(0, 30).stdout
    document = json.loads(outputs["json"])
    assert document["failures"] and document["failures"][0]["type"] == "ValueError"  # still diagnosed
    cited = [e["text"] for c in document["causes"] for e in c["evidence"]]
    assert "[REDACTED]" in cited  # a body line was cited, masked
    for where, text in outputs.items():
        for line in key_lines:
            assert leaked(text, line) is None, f"a key line leaks in {where}"
    raw = cli(["diagnose", "--format", "json", "--no-redact", str(log)]).check(0, 30).stdout
    assert "BEGIN RSA PRIVATE KEY" in raw


def test_secret_in_a_folder_name_leaves_the_rest_of_the_path() -> None:
    from rltriage.pipeline.redact import redact_path

    assert redact_path("/runs/HF_TOKEN=hf_" + "A" * 34 + "/rank0/train.log") == "/runs/HF_TOKEN=[REDACTED]/rank0/train.log"
    assert redact_path("/runs/a/b.log") == "/runs/a/b.log"


def test_html_excerpt_cut_does_not_split_a_secret(tmp_path: Path) -> None:
    """The html page keeps 400 characters of each cited line and redacts them afterwards: the cut
    must not leave the start of a token that no shape recognises any more."""
    from rltriage.pipeline.timeline import TEXT

    token = "hf_" + "H" * 36
    log = tmp_path / "train.log"
    for inside in (1, 3, 20):
        pad = " " * (TEXT - inside)
        log.write_text(f"starting\n{pad}{token} {MARKER}\nRuntimeError: {pad}{token} failed\n")
        page = cli(["diagnose", "--format", "html", str(log)]).check(0, 30).stdout
        assert "first_generation_started" in page  # the cited line is on the page
        assert leaked(page, token[3:]) is None, inside
