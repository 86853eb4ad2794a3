"""Round 2: small run inputs that used to break the time and memory bounds — configs, environment
reports, stdin, archive members — and names and encodings that broke the output. Each case runs the
command line under a time bound and a 200 MB bound on peak memory, checks the one-line warning and the
exit code, and that the good log beside it was still diagnosed."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import tarfile
import zipfile
from pathlib import Path

from rltriage.inputs import archives
from rltriage.pipeline.run import analyse

from .bounds import cli, report

MARKER = "[rltriage] stage=first_generation_started step=0"
GOOD = f"starting\n{MARKER}\ndone\n"


def good_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(GOOD)
    return folder


def diagnosed(stdout: str, log: str) -> dict:
    """The JSON report, after checking that the good log was read and is the boundary's proof."""
    document = json.loads(stdout)
    assert log in [i["path"] for i in document["inputs"]]
    assert document["boundary"]["last_completed"] == "first_generation_started"
    assert any(e["path"] == log for e in document["boundary"]["evidence"])
    return document


def run_json(name: str, run: Path, seconds: float, *extra: str, code: int = 0) -> tuple[dict, list[str]]:
    outcome = cli(["diagnose", "--format", "json", *extra, str(run)], seconds=seconds).check(code, seconds)
    report(name, outcome)
    return diagnosed(outcome.stdout, str(run / "train.log")), outcome.warnings


# --- configs ---------------------------------------------------------------------------------------


def test_config_alias_bomb_is_read_up_to_its_key_limit(tmp_path: Path) -> None:
    run = good_run(tmp_path / "run")
    lines = ["a0: &a0 {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9}"]
    lines += [f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(9)) + "}" for i in range(1, 9)]
    (run / "config.yaml").write_text("\n".join(lines) + "\n")  # 9**9 values from 800 bytes
    document, warnings = run_json("config alias bomb", run, 30)
    assert warnings == [f"rltriage: warning: {run}/config.yaml: config has more than 2000 keys; read the first 2000"]
    assert {"path": f"{run}/config.yaml", "kind": "config", "lines": 9} in document["inputs"]


def test_config_nested_thousands_deep_is_one_warning(tmp_path: Path) -> None:
    run = good_run(tmp_path / "run")
    (run / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # past any parser's recursion
    (run / "deep.yaml").write_text("a: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n")
    nested: dict = {"leaf": 1}
    for _ in range(200):
        nested = {"n": nested}
    (run / "nested.json").write_text(json.dumps({"num_generations": 8, "deep": nested}))  # parses; deeper than 64
    _document, warnings = run_json("configs nested deep", run, 30)
    assert warnings == [
        f"rltriage: warning: {run}/deep.json: config could not be parsed: nested too deep to parse",
        f"rltriage: warning: {run}/deep.yaml: config could not be parsed: nested too deep to parse",
        f"rltriage: warning: {run}/nested.json: config nested more than 64 deep; deeper keys not read",
    ]


def test_large_trainer_state_json_is_parsed_without_the_round_trip_loader(tmp_path: Path) -> None:
    run = good_run(tmp_path / "run")
    rng = random.Random(0)
    history = [{"epoch": i / 100, "grad_norm": rng.random(), "learning_rate": 1e-6, "loss": rng.random(), "reward": rng.random(), "step": i} for i in range(24_000)]
    state = {"best_metric": None, "global_step": 24_000, "log_history": history, "max_steps": 24_000, "num_train_epochs": 3}
    (run / "trainer_state.json").write_text(json.dumps(state, indent=2))
    assert (run / "trainer_state.json").stat().st_size > 4 << 20
    _document, warnings = run_json("4.6 MB trainer_state.json", run, 30)
    assert warnings == []
    analysis = analyse([str(run / "trainer_state.json")])
    config = {f.fields["key"]: (f.fields["value"], f.fields["line"]) for f in analysis.facts if f.type == "config"}
    assert config["max_steps"][0] == 24_000 and config["num_train_epochs"] == (3, len(json.dumps(state, indent=2).splitlines()) - 1)


def test_large_yaml_config_is_read_line_by_line(tmp_path: Path) -> None:
    run = good_run(tmp_path / "run")
    with open(run / "grpo.yaml", "w") as handle:
        handle.write("trainer:\n  num_generations: 8   # group size\n  reward_funcs:\n    - accuracy\n    - format\n")
        for i in range(150_000):
            handle.write(f"# {'filler ' * 3}{i}\n")  # comments: no keys, only size
        handle.write("max_steps: 500\n")
    assert (run / "grpo.yaml").stat().st_size > 4 << 20
    _document, warnings = run_json("4 MB YAML config", run, 30)
    assert warnings == []
    analysis = analyse([str(run / "grpo.yaml")])
    config = {f.fields["key"]: (f.fields["value"], f.fields["line"]) for f in analysis.facts if f.type == "config"}
    assert config == {"trainer.num_generations": (8, 2), "trainer.reward_funcs": (("accuracy", "format"), 3), "max_steps": (500, 150_006)}


def test_environment_report_is_read_past_its_first_8_kib(tmp_path: Path) -> None:
    names = [f"pkg{i:03d}" for i in range(597)] + ["torch", "trl", "vllm"]  # they sort late in a pip freeze
    freeze = "".join(f"{name}==1.{i}.0\n" for i, name in enumerate(sorted(names)))
    assert len(freeze) > 8192 and freeze.index("torch==") > 8192
    (tmp_path / "pip_freeze.txt").write_text(freeze)
    analysis = analyse([str(tmp_path / "pip_freeze.txt")], mode="preflight")
    packages = {f.fields["name"] for f in analysis.facts if f.type == "package"}
    assert {"torch", "trl", "vllm"} <= packages and len(packages) == 600
    assert analysis.diagnosis.inputs[0].lines == 600


# --- stdin and archives ------------------------------------------------------------------------------


def test_stdin_is_streamed(tmp_path: Path) -> None:
    piped = tmp_path / "piped.log"
    block = ("step loss=0.1 nothing to see here at all\n" * 25_000).encode()  # 1 MiB
    with open(piped, "wb") as handle:
        handle.write(GOOD.encode())
        for _ in range(64):
            handle.write(block)
    outcome = cli(["diagnose", "--format", "json", "-"], stdin=piped, seconds=60).check(0, 60)
    report("64 MiB on stdin", outcome)
    document = json.loads(outcome.stdout)
    assert document["inputs"] == [{"path": "<stdin>", "kind": "driver_log", "lines": 64 * 25_000 + 3}]
    assert document["boundary"]["last_completed"] == "first_generation_started"
    assert outcome.rss_mb < 200 and outcome.warnings == []


def sparse_tar(realsize: int = 1 << 40) -> bytes:
    """A tar whose first member is a GNU sparse file: 6 bytes of data and a terabyte of holes."""
    data = b"hello\n"
    info = tarfile.TarInfo("logs/rank0.log")
    info.size = len(data)
    info.type = tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)  # one region: offset 0 …
    header[398:410] = tarfile.itn(len(data), 12, tarfile.GNU_FORMAT)  # … of 6 bytes
    header[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)  # the size it claims
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header[:512])
    good = tarfile.TarInfo("logs/train.log")
    good.size = len(GOOD)
    pad = lambda n: b"\0" * (-n % tarfile.BLOCKSIZE)  # noqa: E731
    return bytes(header[:512]) + data + pad(len(data)) + good.tobuf(format=tarfile.GNU_FORMAT) + GOOD.encode() + pad(len(GOOD)) + b"\0" * 1024


def test_sparse_member_claiming_a_terabyte_is_stopped(tmp_path: Path) -> None:
    tar = tmp_path / "run.tar"
    tar.write_bytes(sparse_tar())
    assert tar.stat().st_size < 4096
    outcome = cli(["diagnose", "--format", "json", str(tar)], seconds=30).check(0, 30)
    report("sparse tar member of 1 TiB", outcome)
    assert outcome.warnings == [
        f"rltriage: warning: {tar}!logs/rank0.log: decompression stopped past 64 MiB: expands more than 200x (decompression bomb?); diagnosed what could be read",
        f"rltriage: warning: {tar}!logs/rank0.log: skipped: binary content",
    ]
    document = json.loads(outcome.stdout)
    assert [i["path"] for i in document["inputs"]] == [f"{tar}!logs/train.log"]
    assert document["boundary"]["last_completed"] == "first_generation_started"


def test_zip_inside_a_tar_gz_is_spooled_not_held_in_memory(tmp_path: Path) -> None:
    block = random.Random(1).randbytes(1 << 20)  # incompressible within gzip's window, yet cheap to make
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("logs/train.log", GOOD)
        archive.writestr("checkpoint.bin", block * 72)
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as tar:
        info = tarfile.TarInfo("bundle.zip")
        info.size = inner.getbuffer().nbytes
        inner.seek(0)
        tar.addfile(info, inner)
    path = tmp_path / "run.tar.gz"
    path.write_bytes(gzip.compress(outer.getvalue(), compresslevel=1))
    outcome = cli(["diagnose", "--format", "json", str(path)], seconds=60).check(0, 60)
    report("72 MiB zip inside a tar.gz", outcome)
    assert outcome.warnings == [f"rltriage: warning: {path}!bundle.zip!checkpoint.bin: skipped: binary content"]
    document = json.loads(outcome.stdout)
    assert [i["path"] for i in document["inputs"]] == [f"{path}!bundle.zip!logs/train.log"]
    assert document["boundary"]["last_completed"] == "first_generation_started"


def test_archive_of_100000_members_is_read_up_to_the_member_limit(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [("logs/train.log", GOOD.encode())] + [(f"logs/w{i:06d}.log", b"x\n") for i in range(100_000)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "run.tar.gz"
    path.write_bytes(buffer.getvalue())
    assert path.stat().st_size < 1 << 20
    outcome = cli(["diagnose", "--format", "json", str(path)], seconds=60).check(0, 60)
    report("100,000 members in a tar.gz", outcome)
    assert outcome.warnings == [f"rltriage: warning: {path}: more than {archives.MAX_MEMBERS} files in the archive; the rest not read"]
    document = json.loads(outcome.stdout)
    assert len(document["inputs"]) == archives.MAX_MEMBERS
    assert document["boundary"]["last_completed"] == "first_generation_started"


# --- names and encodings -----------------------------------------------------------------------------


def test_undecodable_file_names_and_utf16_logs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.close(os.open(os.path.join(os.fsencode(run), b"rank1-\xff\xfe.log"), os.O_CREAT | os.O_WRONLY, 0o644))
    with open(os.path.join(os.fsencode(run), b"rank1-\xff\xfe.log"), "wb") as handle:
        handle.write(b"RuntimeError: boom\n")
    (run / "train.log").write_bytes(GOOD.encode("utf-16"))  # PowerShell's `>` writes this
    outcome = cli(["diagnose", "--format", "json", str(run)], seconds=30).check(0, 30)
    report("undecodable name, UTF-16 log", outcome)
    assert outcome.warnings == [f"rltriage: warning: {run}/train.log: encoded in UTF-16; decoded and read as text"]
    document = diagnosed(outcome.stdout, str(run / "train.log"))
    assert f"{run}/rank1-\\xff\\xfe.log" in [i["path"] for i in document["inputs"]]
