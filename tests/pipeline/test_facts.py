"""Facts from configs, environment reports, scans and the run itself."""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import rltriage
from rltriage.base.vocabulary import InputKind
from rltriage.infer.fact import fact_key
from rltriage.pipeline.facts import config_file_facts, echo_facts, env_report_facts, hit_facts, run_facts, stage_definitions
from rltriage.pipeline.scan import FileScan, HitRecord, Tally, compact, scanner_for


def test_config_files_become_dotted_keys_with_lines() -> None:
    notes: list[str] = []
    facts = config_file_facts("grpo.yaml", b"trainer:\n  num_generations: 8\n  reward_funcs: [a, b]\n", notes)
    by_key = {f.fields["key"]: f for f in facts}
    assert by_key["trainer.num_generations"].fields["value"] == 8 and by_key["trainer.num_generations"].fields["line"] == 2
    assert by_key["trainer.reward_funcs"].fields["value"] == ("a", "b")
    assert by_key["trainer.num_generations"].fields["name"] == "num_generations" and not notes
    assert config_file_facts("bad.yaml", b"a: [\n", notes) == [] and notes[0].startswith("config could not be parsed")


def test_environment_reports() -> None:
    lines = list(enumerate(["PyTorch version: 2.4.1+cu121", "Python platform: Linux-5.4.0-150-generic-x86_64-with-glibc2.31", "vllm==0.6.3"], 1))
    facts = env_report_facts("env.txt", lines)
    found = {(f.type, f.fields.get("name"), f.fields["version"]) for f in facts}
    assert found == {("package", "torch", "2.4.1+cu121"), ("kernel", None, "5.4.0-150-generic"), ("package", "vllm", "0.6.3")}


def test_hits_and_echoes_from_a_scan() -> None:
    kb = rltriage.load_knowledge_base()
    log = b"num_generations=8\n[rltriage] stage=trainer_started step=0\n"
    scan = scanner_for(kb).scan("run.log", InputKind.driver_log, io.BytesIO(log))
    hits = hit_facts(scan)
    marker = next(f for f in hits if f.fields["signature"] == "rltriage.stage_marker")
    assert marker.fields["stage"] == "trainer_started" and marker.fields["last_stage"] == "trainer_started" and marker.fields["line"] == 2
    assert marker.evidence[0].line == 2
    echo = echo_facts(scan)
    assert [(f.fields["key"], f.fields["value"], f.fields["source"]) for f in echo] == [("num_generations", 8, "log")]


def test_run_facts_count_logs_and_define_stages() -> None:
    scans = [FileScan("a.log", InputKind.driver_log, lines=10), FileScan("c.yaml", InputKind.config, lines=3)]
    facts = run_facts("diagnose", scans, 2)
    run = facts[0]
    assert run.type == "run" and run.fields == {"mode": "diagnose", "inputs": 2, "logs": 1, "log_lines": 10}
    assert [f.fields["path"] for f in facts if f.type == "input"] == ["a.log", "c.yaml"]
    stages = stage_definitions()
    assert stages[0].fields == {"name": "model_loaded", "order": 1, "next": "trainer_started"}
    assert stages[-1].fields["next"] is None


def test_environment_variables_and_host_facts_are_read() -> None:
    from rltriage.base.values import env_pairs
    from rltriage.pipeline.facts import env_report_facts

    assert env_pairs("environ({'NCCL_SOCKET_IFNAME': 'eth0', 'A_B': \"x y\"})") == {"NCCL_SOCKET_IFNAME": "eth0", "A_B": "x y"}
    assert env_pairs("NCCL_IB_DISABLE set by environment to 1") == {"NCCL_IB_DISABLE": "1"}
    assert env_pairs("+ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    lines = [
        (1, "NCCL_SOCKET_IFNAME=eth0"),
        (2, "Nvidia driver version: 535.104.05"),
        (3, "CUDA runtime version: 12.1.105"),
        (4, "| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |"),
    ]
    facts = env_report_facts("env.txt", lines)
    got = {(f.type, f.fields["name"]): (f.fields.get("value"), f.fields["line"]) for f in facts}
    assert got[("env", "NCCL_SOCKET_IFNAME")] == ("eth0", 1)
    assert got[("system", "driver")] == ("535.104.05", 2)
    assert got[("system", "cuda_runtime")] == ("12.1.105", 3)
    assert got[("system", "cuda_driver")] == ("12.4", 4)


def test_an_environment_report_is_read_whole_not_only_its_sniffed_head(tmp_path: object) -> None:
    from pathlib import Path

    from rltriage.inputs.discover import SNIFF_BYTES
    from rltriage.pipeline.run import analyse

    folder = Path(str(tmp_path))
    lines = [f"package-number-{i:04d}==1.0.{i}" for i in range(SNIFF_BYTES // 10)] + ["vllm==0.8.5.post1"]
    (folder / "pip-freeze.txt").write_text("\n".join(lines) + "\n")
    assert len((folder / "pip-freeze.txt").read_bytes()) > 2 * SNIFF_BYTES
    analysis = analyse([str(folder)])
    packages = {f.get("name"): f.get("version") for f in analysis.inference.facts_of("package")}
    assert packages.get("vllm") == "0.8.5.post1", "the last line of a long pip freeze is a fact"


def test_nvidia_smi_memory_rows_become_gpu_memory_facts(tmp_path: object) -> None:
    from pathlib import Path

    from rltriage.pipeline.run import analyse

    folder = Path(str(tmp_path))
    header = "| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |\n"
    row = "| N/A   41C    P0            152W /  700W |   {used}MiB /  81559MiB |     97%      Default |\n"
    for name, used, state in (("full", 80873, "full"), ("room", 23417, "room"), ("between", 70000, None)):
        (folder / name).mkdir()
        (folder / name / "nvidia-smi.txt").write_text(header + row.format(used=used))
        analysis = analyse([str(folder / name)])
        assert analysis.scans[0].kind is InputKind.env_report
        states = [f.get("state") for f in analysis.inference.facts_of("gpu_memory")]
        assert states == ([state] if state else []), (name, states)
        assert any(f.get("name") == "driver" for f in analysis.inference.facts_of("system")), "the header is still read"


def _hit_dict(scan: FileScan, tally: Tally) -> dict[str, Any]:
    """A hit fact's fields built as a dict, value by value: what the fact's view must read as."""
    assert tally.first is not None
    fields: dict[str, Any] = dict(tally.first.values)
    last = tally.last if tally.last is not None else tally.first
    fields.update({f"last_{name}": value for name, value in last.values.items()})
    fields.update(
        signature=tally.signature, path=scan.path, kind=scan.kind.value, count=tally.count, line=tally.first.line, text=tally.first.text,
        rank=tally.first.rank, ranks=len(tally.ranks), timestamp=tally.first.timestamp,
    )
    return fields


value_names = st.sampled_from(["step", "last_step", "rank", "count", "path", "text", "nranks", "signature"])
group_values = st.dictionaries(value_names, st.one_of(st.integers(-2, 300), st.text(max_size=3), st.none()), max_size=4)


@settings(max_examples=200, deadline=None)
@given(group_values, st.one_of(st.none(), group_values), st.integers(1, 5), st.sets(st.integers(0, 7), max_size=3))
def test_hit_fields_read_as_the_dict_built_value_by_value(first: dict[str, Any], last: dict[str, Any] | None, count: int, ranks: set[int]) -> None:
    tally = Tally("sig.one", count=count, first=HitRecord(2, "first line", 1, values=first, timestamp=3.5), ranks=ranks)
    if last is not None:
        tally.last = HitRecord(9, "last line", None, values=last)
    scan = compact(FileScan("a.log", InputKind.driver_log, lines=10, tallies={"sig.one": tally}))
    (fact,) = hit_facts(scan)
    expected = _hit_dict(scan, tally)
    assert list(fact.fields.items()) == list(expected.items())
    assert fact_key("hit", fact.fields) == fact_key("hit", expected)


def test_input_facts_read_their_scan() -> None:
    scans = [FileScan("a.log", InputKind.driver_log, lines=10)]
    (fact,) = [f for f in run_facts("diagnose", scans, 1) if f.type == "input"]
    assert list(fact.fields.items()) == [("path", "a.log"), ("kind", "driver_log"), ("lines", 10)]
