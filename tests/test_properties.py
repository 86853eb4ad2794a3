"""Property-based tests: arbitrary input never raises and never takes super-linear time."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rltriage
from rltriage.base.errors import KnowledgeBaseError
from rltriage.base.vocabulary import InputKind
from rltriage.inputs.normalize import segments
from rltriage.pipeline.scan import scanner_for

from .conftest import FIXTURES

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

LOG_ALPHABET = st.sampled_from(
    ["\n", "\r", "\r\n", "\x1b[32m", "\x1b[0m", "(WorkerDict pid=12, ip=10.0.0.1) ", "[rank3]:", " [repeated 4x across cluster]", "%|", "0/10 [00:00<?, ?it/s]",
     "Watchdog caught collective operation timeout", "CUDA out of memory. Tried to allocate ", "{'loss': ", "[rltriage] stage=", "\x00", "\xff", "é", "a", " ", "1", "GiB"]
)


@FAST
@given(st.text())
def test_normaliser_never_raises(text: str) -> None:
    for segment in segments(text):
        assert "\x1b[" not in segment.raw
        assert segment.repeat >= 1


@FAST
@given(st.binary(max_size=4096))
def test_scanner_accepts_any_bytes(data: bytes) -> None:
    scanner = scanner_for(rltriage.load_knowledge_base())
    result = scanner.scan("fuzz", InputKind.driver_log, io.BytesIO(data))
    assert result.lines >= data.count(b"\n")


@FAST
@given(st.lists(LOG_ALPHABET, max_size=200))
def test_scanner_accepts_log_shaped_noise(parts: list[str]) -> None:
    scanner = scanner_for(rltriage.load_knowledge_base())
    data = "".join(parts).encode("utf-8", "surrogatepass")
    result = scanner.scan("fuzz", InputKind.rank_log, io.BytesIO(data))
    for tally in result.tallies.values():
        assert tally.count >= 1 and tally.first is not None


def _seconds(function, argument) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        function(argument)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    ["\r" * 50 + "x", " 50%|█████     | 5/10 [00:05<00:05,  1.00it/s]\r", "(A pid=1) " * 20, "[rank1]:" * 30, "Watchdog caught collective " * 10, "a" * 200],
)
def test_scanner_time_is_linear(unit: str) -> None:
    scanner = scanner_for(rltriage.load_knowledge_base())

    def scan(text: str) -> None:
        scanner.scan("x", InputKind.driver_log, io.BytesIO(text.encode()))

    small = unit * 200 + "\n"
    large = unit * 3200 + "\n"
    ratio = _seconds(scan, large) / max(_seconds(scan, small), 1e-4)
    assert ratio < 64, f"16x more input took {ratio:.0f}x longer"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=400))
def test_yaml_loader_reports_or_loads(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    pack = tmp_path_factory.mktemp("pack")
    (pack / "rules" / "x").mkdir(parents=True)
    (pack / "rules" / "x" / "y.yaml").write_text(text, encoding="utf-8")
    try:
        rltriage.load_knowledge_base([pack], include_builtin=False)
    except KnowledgeBaseError as exc:
        assert exc.problems
        assert all(p.path.endswith("y.yaml") and p.line >= 1 and p.col >= 1 for p in exc.problems)


@settings(max_examples=10, deadline=None)
@given(st.permutations(sorted(p.name for p in (FIXTURES / "trl/reward_never_returned").iterdir())))
def test_file_order_does_not_change_the_diagnosis(order: list[str]) -> None:
    folder = FIXTURES / "trl/reward_never_returned"
    expected = rltriage.diagnose(sorted(str(folder / n) for n in order)).model_dump_json()
    assert rltriage.diagnose([str(folder / n) for n in order]).model_dump_json() == expected


def _signature_pack(folder: Path, pattern: str) -> Path:
    (folder / "signatures" / "lab").mkdir(parents=True)
    (folder / "rules" / "lab").mkdir(parents=True)
    (folder / "signatures" / "lab" / "slow.yaml").write_text(
        f"id: lab.slow\ntitle: a pattern under test\nsource: test\npattern: '{pattern}'\n"
        "examples:\n  match: ['Watchdog caught aa!']\n  no_match: ['nothing']\n"
    )
    (folder / "rules" / "lab" / "slow.yaml").write_text(
        "id: lab.slow\ntitle: uses the signature\nrole: evidence\nsource: test\nbucket: cluster_infra\nissue: x\nreason: y\n"
        "when: {all: [{hit: lab.slow}]}\nthen: {evidence: {weight: 0.5}}\nfix: nothing\n"
    )
    return folder


def test_one_bad_signature_cannot_stall_a_diagnosis(tmp_path: Path) -> None:
    tame = _signature_pack(tmp_path / "tame", "Watchdog caught(a+)!")
    slow = _signature_pack(tmp_path / "slow", "Watchdog caught((a|aa)+)!")  # backtracks 2**40 ways on the log below
    log = tmp_path / "train.log"
    log.write_text(("Watchdog caught" + "a" * 40 + "\n") * 3 + "{'loss': 0.1, 'grad_norm': 0.2, 'learning_rate': 1e-06}\n")
    # Processor time against the same diagnosis with a tame pack (loading and compiling a pack costs
    # the same): a busy machine stretches wall time, a pattern that backtracks without bound burns
    # processor time.
    start = time.process_time()
    rltriage.diagnose([log], rules_dirs=[tame])
    baseline = time.process_time() - start
    began, start = time.monotonic(), time.process_time()
    diagnosis = rltriage.diagnose([log], rules_dirs=[slow])
    assert time.process_time() - start - baseline < 5
    assert time.monotonic() - began < 120
    assert any("signature lab.slow gave up after" in w.message for w in diagnosis.warnings)


def test_templates_cannot_reach_python_internals(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    (pack / "rules" / "lab").mkdir(parents=True)
    (pack / "rules" / "lab" / "escape.yaml").write_text(
        "id: lab.escape\ntitle: tries to escape the sandbox\nrole: evidence\nsource: test\nbucket: cluster_infra\nissue: x\nreason: y\n"
        "when: {all: [{hit: hf.log_dict}]}\nthen: {evidence: {weight: 0.5}}\n"
        "fix: \"{{ cfg.__globals__ }} {{ ''.__class__.__mro__[1].__subclasses__() }}\"\n"
    )
    log = tmp_path / "train.log"
    log.write_text("{'loss': 0.1, 'grad_norm': 0.2, 'learning_rate': 1e-06}\n")
    diagnosis = rltriage.diagnose([log], rules_dirs=[pack])
    text = diagnosis.model_dump_json()
    assert "__subclasses__" not in text.replace("escape", "") or "<class" not in text
    assert "<class 'object'>" not in text and "__builtins__" not in text
    assert any("fix template failed to render" in w.message for w in diagnosis.warnings)


def test_runaway_rule_chain_is_stopped_with_the_rule_named(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rltriage.cli import main

    pack = tmp_path / "pack"
    (pack / "rules" / "lab").mkdir(parents=True)
    (pack / "rules" / "lab" / "seed.yaml").write_text(
        "id: lab.seed\ntitle: seed a counter\nrole: derive\nsource: test\nwhen: {all: [{fact: run}]}\nthen: {derive: [{fact: counter, fields: {n: 0}}]}\n"
    )
    (pack / "rules" / "lab" / "grow.yaml").write_text(
        "id: lab.grow\ntitle: count forever\nrole: derive\nsource: test\nwhen: {all: [{fact: counter, as: c}]}\n"
        "then: {derive: [{fact: counter, fields: {n: '{{ c.n + 1 }}'}}]}\n"
    )
    log = tmp_path / "train.log"
    log.write_text("hello\n")
    result = CliRunner().invoke(main, ["diagnose", "--rules-dir", str(pack), str(log)])
    assert result.exit_code == 3
    assert "firing budget of 50000 exceeded: rule lab.grow fired" in result.stderr
