"""The html report's data, without a browser: one timeline row per process, placed on the run's
clock, the rows that stand out, redacted excerpts, escaped text; the CLI, library and batch ways to
get a page. The browser checks are in tests/test_html_browser.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import rltriage
from rltriage import KnowledgeBase
from rltriage.base.vocabulary import LOG_KINDS, InputKind
from rltriage.cli import main
from rltriage.inputs.normalize import timestamp
from rltriage.inputs.stacks import process_of
from rltriage.pipeline.run import Analysis, analyse
from rltriage.tools.batch import page_name, run_batch

from ..conftest import FIXTURES, all_fixtures, rendered
from ..generated_runs import SCRIPT, SECRET, hostile, many_ranks

ODD = FIXTURES / "stacks/odd_rank_in_reward"


def test_odd_rank_fixture_has_a_row_per_process(kb: KnowledgeBase) -> None:
    timeline = rendered(ODD, kb).details.timeline
    assert [(r.label, r.role) for r in timeline.rows] == [("train.log", "driver"), ("rank0", "rank"), ("rank1", "rank"), ("rank2", "rank"), ("rank3", "rank")]
    by_id = {r.id: r for r in timeline.rows}
    assert by_id["rank2"].flags == ["odd-one-out"]
    assert by_id["rank2"].waits_in == "_sympify (sympy/core/sympify.py:481)"
    assert by_id["rank0"].waits_in == "all_gather_object (torch/distributed/distributed_c10d.py:2891)"
    # The driver wrote nothing for 30 minutes before it collected the dumps.
    driver = timeline.rows[0]
    assert driver.clock == "time" and any(s.seconds > 1800 for s in driver.silences)
    # The dumps carry no time: drawn at the end, and said so.
    assert all(m.placed == "end" for r in timeline.rows[1:] for m in r.marks)
    assert any("Stack dumps carry no time" in note for note in timeline.notes)
    assert timeline.boundary is not None and timeline.boundary.path.endswith("stacks-rank0.txt") and timeline.boundary.line == 8


def _expected_processes(analysis: Analysis) -> set[str]:
    """The processes the analysis itself names, independently of the timeline: every log file with
    lines (its rank when the name says one), every process a failure or a stack names, every rank a
    signature hit came from."""
    files = {s.path: s for s in analysis.scans}
    names: set[str] = set()
    for scan in analysis.scans:
        if scan.kind in LOG_KINDS and scan.kind is not InputKind.stack_dump and scan.lines:
            names.add(process_of(scan.path) if process_of(scan.path).startswith("rank") else scan.path)
    for fact in analysis.inference.facts:
        if fact.type == "hit" and fact.get("rank") is not None and fact.get("path") in files and files[fact.get("path")].kind is not InputKind.stack_dump:
            names.add(f"rank{fact.get('rank')}")
        if fact.type in ("stack", "failure") and fact.get("process"):
            process = str(fact.get("process"))
            names.add(str(fact.get("path")) if process == str(fact.get("path")).rsplit("/", 1)[-1] else process)
    return names


@pytest.mark.parametrize("folder", all_fixtures(), ids=[str(p.relative_to(FIXTURES)) for p in all_fixtures()])
def test_every_fixture_has_a_row_for_each_process_it_names(folder: Path, kb: KnowledgeBase) -> None:
    page = rendered(folder, kb)
    timeline = page.details.timeline
    ids = [r.id for r in timeline.rows]
    assert len(ids) == len(set(ids)), "one row per process"
    aliases = {p: r.id for r in timeline.rows for p in [*r.paths, *r.aka]}
    expected = _expected_processes(page.analysis)
    missing = {name for name in expected if name not in ids and aliases.get(name) not in ids}
    assert not missing, f"processes without a row: {sorted(missing)}; rows: {ids}"
    for row in timeline.rows:
        assert row.lines or row.waits_in, f"{row.id}: an empty row"
        assert all(0.0 <= m.pos <= 1.0 for m in row.marks)
        assert 0.0 <= row.start <= row.end <= 1.0
    diagnosis = page.analysis.diagnosis
    if diagnosis.boundary.evidence and diagnosis.boundary.evidence[0].path in {s.path for s in page.analysis.scans if s.kind in LOG_KINDS}:
        proof = diagnosis.boundary.evidence[0]
        assert timeline.boundary is not None
        assert (timeline.boundary.path, timeline.boundary.line) == (proof.path, proof.line)
        stamp = timestamp(proof.text)
        if timeline.clock == "time" and stamp is not None and timeline.boundary.placed == "time":
            assert timeline.start is not None and timeline.end is not None
            assert timeline.boundary.pos == pytest.approx((stamp - timeline.start) / (timeline.end - timeline.start), abs=1e-6)


def test_256_ranks_one_row_each_the_stuck_rank_singled_out(tmp_path: Path, kb: KnowledgeBase) -> None:
    run = many_ranks(tmp_path / "run")
    analysis = analyse([str(run)], kb=kb)
    timeline = analysis.details().timeline
    assert [r.id for r in timeline.rows] == [str(run / "launcher.log")] + [f"rank{i}" for i in range(256)]
    stuck = next(r for r in timeline.rows if r.id == "rank137")
    assert set(stuck.flags) == {"silent-first", "odd-one-out"}
    assert not stuck.failed and stuck.last_line is not None and "computing math_verify_reward" in stuck.last_line.text
    assert sum(1 for r in timeline.rows if r.failed) == 255
    assert [kind for kind, _sentence, _row in timeline.findings] == ["boundary", "first-failure", "odd-one-out", "silent-first"]
    page = rltriage.render(analysis.diagnosis, "html", kb=kb)
    assert "The per-process timeline needs the logs" in page
    full = rltriage.report([str(run)], "html")
    assert len(full.encode("utf-8")) < 2 * 1024 * 1024
    assert full.count('class="row ') == 257


def test_rows_from_prefixes_in_one_combined_log(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text(
        "2025-05-14 09:00:00,000 - INFO - launching\n"
        "[rank0]: 2025-05-14 09:00:01,000 - INFO - [rltriage] stage=trainer_started\n"
        "[rank1]: 2025-05-14 09:00:01,500 - INFO - [rltriage] stage=trainer_started\n"
        "(WorkerDict pid=4242, ip=10.0.0.2) 2025-05-14 09:00:02,000 - INFO - actor ready\n"
        "(EngineCore_DP0 pid=4300) INFO 05-14 09:00:03 [core.py:1] engine ready\n"
        "[rank0]: 2025-05-14 09:05:00,000 - INFO - still here\n"
        "2025-05-14 09:06:00,000 - INFO - done\n"
    )
    timeline = analyse([str(log)]).details().timeline
    roles = {r.id: r.role for r in timeline.rows}
    assert roles == {str(log): "driver", "rank0": "rank", "rank1": "rank", "WorkerDict pid=4242": "worker", "EngineCore_DP0 pid=4300": "engine"}
    rank0 = next(r for r in timeline.rows if r.id == "rank0")
    assert rank0.lines == 2 and [m.label for m in rank0.marks if m.kind == "marker"] == ["trainer_started"]
    assert rank0.last is not None and timeline.start is not None and rank0.last - timeline.start == pytest.approx(300.0)


def test_files_without_timestamps_are_placed_by_line_order(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("2025-05-14 09:00:00 - INFO - start\n2025-05-14 09:10:00 - INFO - step\n")
    (tmp_path / "worker.log").write_text("loading\nworking\nRuntimeError: boom\n")
    timeline = analyse([str(tmp_path)]).details().timeline
    assert timeline.clock == "time"
    worker = next(r for r in timeline.rows if r.label == "worker.log")
    assert worker.clock == "lines" and any("line order" in note for note in timeline.notes)
    failure = next(m for m in worker.marks if m.kind == "failure")
    assert failure.placed == "lines" and failure.pos == pytest.approx(2.5 / 3)
    (tmp_path / "train.log").unlink()
    assert analyse([str(tmp_path)]).details().timeline.clock == "lines"


def test_a_stamp_off_the_files_clock_does_not_stretch_the_axis(tmp_path: Path) -> None:
    lines = [f"2025-06-14 09:{minute:02d}:00 - INFO - step {minute}" for minute in range(10)]
    lines.insert(3, "INFO 06-02 09:02:33 [__init__.py:244] another component's clock, twelve days behind")
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    timeline = analyse([str(tmp_path)]).details().timeline
    assert timeline.seconds == pytest.approx(540.0)


def test_hostile_lines_are_redacted_and_escaped(tmp_path: Path) -> None:
    run = hostile(tmp_path / "run")
    (run / "x<img src=y onerror=alert(1)>.log").write_text("ValueError: <b>not bold</b>\n")
    page = rltriage.report([str(run)], "html")
    assert SECRET not in page and "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSj" not in page
    assert "[REDACTED]" in page
    excerpt = page[page.index('id="excerpts"') :]
    # The BEGIN and END lines hold nothing secret and stay; the body line between them is masked.
    assert re.search(r"-----BEGIN PRIVATE KEY-----\s*</[^>]+>[\s\S]{0,400}?\[REDACTED\]", excerpt), "the key's body line is masked"
    assert SCRIPT not in page and "<img src" not in page and "<b>" not in page
    assert "&lt;script&gt;window.__rltriage_pwned = 1&lt;/script&gt;" in page
    assert len(re.findall(r"<script\b", page)) == 1
    kept = rltriage.report([str(run)], "html", redact=False)
    assert SECRET in kept and "not redacted" in kept


def test_planted_secrets_reach_no_page(tmp_path: Path) -> None:
    secrets = {
        "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "aws": "AKIAIOSFODNN7EXAMPLE",
        "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "url": "s3cr3t-pa55",
        "env": "hunter2-very-secret",
        "private_key": "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0",
    }
    log = (FIXTURES / "trl/reward_never_returned/train.log").read_text().splitlines(keepends=True)
    planted = (
        f"2025-05-14 09:13:58 - INFO - rltriage - [rltriage] stage=first_generation_finished step=0 HF_TOKEN={secrets['hf']} "
        f"aws={secrets['aws']} Authorization: Bearer {secrets['bearer']} https://trainer:{secrets['url']}@judge.internal/v1\n"
    )
    # The cited stage line itself, a neighbour in its excerpt, the process's last line, and a key block.
    log[18] = planted
    log.insert(19, f"DB_PASSWORD={secrets['env']}\n")
    log += ["-----BEGIN RSA PRIVATE KEY-----\n", secrets["private_key"] + "\n", "-----END RSA PRIVATE KEY-----\n", f"HF_TOKEN={secrets['hf']}\n"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("".join(log))
    pages = tmp_path / "pages"
    outputs = [rltriage.report([str(run)], "html")]
    run_batch(str(run), html=str(pages), write_line=lambda line: None)
    outputs += [p.read_text(encoding="utf-8") for p in sorted(pages.iterdir())]
    assert "[REDACTED]" in outputs[0] and "DB_PASSWORD=[REDACTED]" in outputs[0]
    for output in outputs:
        for name, secret in secrets.items():
            assert secret not in output, f"{name} secret leaked"


def test_a_page_is_deterministic(kb: KnowledgeBase) -> None:
    first = rltriage.report([str(ODD)], "html")
    assert first == rltriage.report([str(ODD)], "html")
    assert 'http-equiv="Content-Security-Policy"' in first and "default-src &#39;none&#39;" in first
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", first), "nothing is fetched"


def test_cli_html_to_a_file_and_to_stdout(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["diagnose", "-o", str(target), str(ODD)])
    assert result.exit_code == 0, result.output
    text = target.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and 'id="tl"' in text
    printed = CliRunner().invoke(main, ["diagnose", "--format", "html", str(ODD)])
    assert printed.exit_code == 0 and printed.stdout == text
    explicit = CliRunner().invoke(main, ["diagnose", "--format", "text", "-o", str(tmp_path / "r.html"), str(ODD)])
    assert explicit.exit_code == 0 and (tmp_path / "r.html").read_text().startswith("rltriage ")
    with pytest.raises(ValueError):
        rltriage.report([str(ODD)], "pdf")


def test_batch_writes_a_page_per_run_and_an_index(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for name in ("stacks/odd_rank_in_reward", "trl/reward_never_returned"):
        shutil.copytree(FIXTURES / name, root / name.replace("/", "-"))
    (root / "missing").mkdir()
    (root / "missing" / "x.log").write_text("")
    pages = tmp_path / "pages"
    lines: list[str] = []
    run_batch(str(root), jobs=2, html=str(pages), write_line=lines.append)
    runs = [json.loads(line)["run"] for line in lines]
    assert sorted(p.name for p in pages.iterdir()) == sorted([page_name(r) for r in runs] + ["index.html"])
    index = (pages / "index.html").read_text(encoding="utf-8")
    for run in runs:
        assert f'href="{page_name(run)}"' in index
    assert "reward_blocking" in index and 'class="runs"' in index
    assert (pages / page_name(runs[0])).read_text(encoding="utf-8").startswith("<!doctype html>")
