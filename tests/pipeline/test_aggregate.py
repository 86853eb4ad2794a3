"""The aggregated scan gives exactly what the full path gives: the same tallies (counts, ranks, first,
samples and last records with their values and timestamps), config echoes, unexplained lines, stack
headers, failures and warnings, and so the same facts and the same report, on every fixture and on
generated logs built to exercise what the aggregated path treats specially.

Every test runs twice: with the compiled module `_linescan` settling the lines it can, and with the
aggregated path in Python alone. Without the module the first run skips, unless
RLTRIAGE_REQUIRE_NATIVE=1 (CI, where the library is installed) makes that a failure; the same for
the module's PCRE2 part and RLTRIAGE_REQUIRE_PCRE2=1."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rltriage
from rltriage import KnowledgeBase
from rltriage.base.vocabulary import InputKind
from rltriage.pipeline.matcher import _LINESCAN, _PCRE2_DIFFERS, _may_span_a_cut, _native_pattern, _pattern_confirms, native_available
from rltriage.pipeline.render import render_report
from rltriage.pipeline.run import analyse
from rltriage.pipeline.scan import CHUNK, SAMPLES, FileScan, Scanner, config_keys

from ..conftest import all_fixtures


@pytest.fixture(scope="module", params=["compiled", "python"])
def native(request: pytest.FixtureRequest) -> Iterator[str]:
    """RLTRIAGE_NATIVE for the module's tests: the compiled module on, or off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLTRIAGE_NATIVE", "1" if request.param == "compiled" else "0")
        if request.param == "compiled" and not native_available():
            if os.environ.get("RLTRIAGE_REQUIRE_NATIVE") == "1":
                pytest.fail("RLTRIAGE_REQUIRE_NATIVE=1 but rltriage.pipeline._linescan is not built (apt-get install libhyperscan-dev, then reinstall)")
            pytest.skip("the compiled module _linescan is not built")
        yield request.param


@pytest.fixture(scope="module")
def scanners(kb: KnowledgeBase, native: str) -> tuple[Scanner, Scanner]:
    reference = Scanner(kb, config_keys(kb), aggregate=False)
    aggregated = Scanner(kb, config_keys(kb), aggregate=True)
    matcher = aggregated.matcher()
    if matcher is None:
        pytest.skip("no Hyperscan: there is no aggregated path")
    assert (matcher.native is not None) == (native == "compiled")
    return reference, aggregated


def _record(record: Any) -> Any:
    return None if record is None else (record.line, record.text, record.rank, repr(record.values), record.timestamp)  # repr: nan != nan


def summary(scan: FileScan) -> dict[str, Any]:
    return {
        "lines": scan.lines,
        "last_timestamp": scan.last_timestamp,
        "tallies": {
            key: (t.signature, t.count, sorted(t.ranks), _record(t.first), [_record(r) for r in t.samples], _record(t.last))
            for key, t in scan.tallies.items()
        },
        "tally_order": list(scan.tallies),
        "config": [(e.key, e.value, e.line, e.text) for e in scan.config],
        "warnings": scan.warnings,
        "unexplained": {k: (u.count, u.line, u.text) for k, u in scan.unexplained.items()},
        "stack_headers": scan.stack_headers,
        "failures": [repr(f) for f in scan.failures],
    }


def assert_same_scan(scanners: tuple[Scanner, Scanner], data: bytes, kind: InputKind = InputKind.driver_log) -> FileScan:
    reference, aggregated = scanners
    expected = summary(reference.scan("run.log", kind, io.BytesIO(data)))
    got = aggregated.scan("run.log", kind, io.BytesIO(data))
    actual = summary(got)
    for field in expected:
        if field == "tallies":
            for key in sorted(set(expected[field]) | set(actual[field])):
                assert actual[field].get(key) == expected[field].get(key), f"tally {key!r}"
        assert actual[field] == expected[field], field
    matcher = aggregated.matcher()
    if matcher is not None and matcher.native is not None:
        # Chunks classified ahead in threads (deferring what needs Python) are settled to the same.
        assert summary(aggregated.scan("run.log", kind, io.BytesIO(data), threads=2)) == actual
    return got


def report_of(paths: list[str], kb: KnowledgeBase, jobs: int = 1) -> tuple[list[Any], str]:
    analysis = analyse(paths, kb=kb, jobs=jobs)
    facts = [(f.type, repr(sorted(f.fields.items(), key=lambda item: item[0])), f.evidence) for f in analysis.facts]  # repr: nan != nan
    return facts, render_report(kb, analysis.diagnosis, "json")


@pytest.mark.parametrize("fixture", all_fixtures(), ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_every_fixture_gives_the_same_facts_and_report(fixture: Path, kb: KnowledgeBase, scanners: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = [str(p) for p in sorted(fixture.iterdir()) if p.name != "expect.yaml"]
    monkeypatch.setenv("RLTRIAGE_SCAN", "reference")
    expected = report_of(inputs, kb)
    monkeypatch.setenv("RLTRIAGE_SCAN", "aggregate")
    assert report_of(inputs, kb) == expected


# Lines the aggregated path treats specially, around signatures' own example lines.
DECORATIONS = (
    lambda line: line,
    lambda line: line,
    lambda line: "(WorkerDict pid=4242, ip=10.0.0.7) " + line,
    lambda line: "[rank3]:" + line,
    lambda line: "[rank5]: " + line,
    lambda line: "[default1]:" + line,
    lambda line: "(raylet) " + line,
    lambda line: "(pid=77) [rank2]:" + line,
    lambda line: "2025-05-14T09:13:14.220123456Z " + line,
    lambda line: "[2025-05-14T09:13:14+00:00] (pid=77) " + line,
    lambda line: "2025-05-14T09:13:14 " + line,
    lambda line: "2025-05-14 09:13:14,220 " + line,
    lambda line: "> " + line,
    lambda line: "2025-05-14T09:13:14.220123456Z stderr F " + line,
    lambda line: ">(pid=77) " + line,
    lambda line: ">>> " + line,
    lambda line: "(not a prefix) " + line,
    lambda line: "(EngineCore_DP0 pid=9) " + line,
    lambda line: "(WorkerDict pid=12, ip=10.0.0.1) [rank3]: " + line,
    lambda line: "(pid=5) (raylet) " + line,
    lambda line: "(TaskRunner pid=7 +2m3s)\t" + line,
    lambda line: "(pid=8)" + line,
    # Ray's prefix as the compiled module reads it: a name that ends right before `pid=`, an address
    # that is not one, a second prefix after it.
    lambda line: "(xpid=3) " + line,
    lambda line: "(Actor pid=1, ip=zz) " + line,
    lambda line: "(pid=1)(pid=2) " + line,
    lambda line: "(Actor, pid=1 +1h2m) [rank1]: " + line,
    lambda line: "[INFO] " + line,
    lambda line: line + " [repeated 3x across cluster]",
    lambda line: "\x1b[32m" + line + "\x1b[0m",
    lambda line: line + "\r",
    lambda line: " 10%|█         | 1/10 [00:01<00:09, 1.00s/it]\r" + line,
    lambda line: line + "\r 20%|██        | 2/10 [00:02<00:08, 1.00s/it]",
    lambda line: "\r".join([" 30%|███       | 3/10 [00:03<00:07, 1.00s/it]"] * 6 + [line]),
    lambda line: "\r  \r".join([line, "Loading shards", " 40%|████      | 4/10 [00:04<00:06, 1.00s/it]", line, " 50%|█████     | 5/10"]),
    lambda line: "(pid=3) " + line + "\r(pid=3) " + line,
    # What the compiled module cuts apart before its scan: a failure word in a Ray prefix, a control
    # character in a blank redraw, a failure word in a redraw that is dropped, a prefix in a redraw.
    lambda line: "(Killed pid=4) " + line,
    lambda line: "(Actor pid=4) " + line + "\r\x0b\r" + line,
    lambda line: "\r".join([line] + [" 30%|███       | 3/10 [00:03<00:07, 1.00s/it] Killed"] * 3 + [line, line]),
    lambda line: " 60%|██████    | 6/10 [00:06<00:04, 1.00s/it]\r(Killed pid=4) " + line,
    lambda line: line + " é",
    lambda line: line + " ٣",
    lambda line: line + "\x0c",
    lambda line: "\t" + line,
    lambda line: line.upper(),
    lambda line: line + " ERROR",
    lambda line: line + " num_generations=8",
)


def example_lines(kb: KnowledgeBase) -> list[str]:
    lines: list[str] = []
    for sig in kb.signatures.values():
        if sig.model.scope == "line":
            lines += [example.line for example in sig.model.examples.match]
            lines += list(sig.model.examples.no_match)
    return [line for line in lines if "\n" not in line]


def generated_log(kb: KnowledgeBase, seed: int, size: int) -> bytes:
    rng = random.Random(seed)
    pool = example_lines(kb)
    out: list[str] = []
    written = 0
    while written < size:
        line = rng.choice(DECORATIONS)(rng.choice(pool))
        # Runs of one line: hits beyond the samples are what the aggregated path counts.
        for _ in range(rng.choice((1, 1, 2, SAMPLES + 3))):
            out.append(line)
            written += len(line) + 1
    return ("\n".join(out) + "\n").encode("utf-8")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_logs_give_the_same_scan(kb: KnowledgeBase, scanners: Any, seed: int) -> None:
    scan = assert_same_scan(scanners, generated_log(kb, seed, 3 * CHUNK // 2))
    assert sum(t.count for t in scan.tallies.values()) > 1000


def test_literal_markers_that_may_run_across_the_end_of_a_ray_prefix_are_told_apart() -> None:
    # The end of a Ray prefix is `)` and one optional blank; the text after it never starts another.
    assert _may_span_a_cut(") foo") and _may_span_a_cut(" foo") and _may_span_a_cut("a) b") and _may_span_a_cut("x)\tb")
    assert not _may_span_a_cut(" (idle)")  # the text after the cut would start with `(`
    assert not _may_span_a_cut("Signal 9 (SIGKILL)") and not _may_span_a_cut("Traceback (most recent call last)")
    assert not _may_span_a_cut("x)") and not _may_span_a_cut("NCCL error")


def test_the_knowledge_base_lets_ray_prefixes_be_cut_and_the_scan_is_the_same_when_they_are_not(kb: KnowledgeBase, scanners: Any, native: str) -> None:
    matcher = scanners[1].matcher()
    assert matcher.cuttable  # no literal marker of the knowledge base can run across a Ray prefix's end
    if native != "compiled":
        return
    # Not cuttable, the compiled module scans a Ray-prefixed line whole for its markers: the same scan.
    data = generated_log(kb, 4, CHUNK // 2)
    expected = summary(scanners[1].scan("run.log", InputKind.driver_log, io.BytesIO(data)))
    matcher.cuttable = False
    try:
        assert_same_scan(scanners, data)
        assert summary(scanners[1].scan("run.log", InputKind.driver_log, io.BytesIO(data))) == expected
    finally:
        matcher.cuttable = True


def test_a_failure_word_anywhere_on_a_cut_line_takes_it_to_the_full_path(kb: KnowledgeBase, scanners: Any) -> None:
    # The compiled module scans a Ray prefix and every redraw as lines of their own. A failure word
    # in the prefix, or in a redraw the normaliser drops, still opens a failure window there (which
    # takes in the exception line before it) once the line's signature keeps no more records (from
    # the second chunk on), when the line would otherwise only be counted.
    loaded = "Model loading took 2.5 GiB and 3.0 seconds"
    first_chunk = CHUNK // (len(loaded) + 1) + 1
    exception = "requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded"  # no failure word
    bar = " 30%|███       | 3/10 [00:03<00:07, 1.00s/it] Killed"
    filler = ["worker is still warming up"] * 40
    lines = [loaded] * first_chunk + filler + [exception, "(Killed pid=4) " + loaded] + filler
    lines += [exception, "\r".join([loaded, bar, bar, bar, loaded, loaded])] + filler + [exception, loaded] + filler
    scan = assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))
    assert scan.tallies["vllm.model_loading_took"].count == first_chunk + 1 + 3 + 1  # each redraw kept counts
    assert [failure.type for failure in scan.failures] == ["ConnectTimeout", "ConnectTimeout"]  # not the last: no failure word


def test_a_widened_signature_is_confirmed_only_on_lines_longer_than_its_bound(kb: KnowledgeBase, scanners: Any) -> None:
    # trl.slow_step_rate allows at most 200 characters of bar; its translation allows any number. A
    # line of 200 bytes or fewer cannot tell the two apart, so its hit stands; a longer one is
    # confirmed with the exact form, which turns down a bar of 250.
    matcher = scanners[1].matcher()
    assert matcher.within[matcher.names.index("trl.slow_step_rate")] == 200
    short = "  0%|          | 3/2000 [07:12<80:01:10, 144.12s/it]"
    long_bar = "  0%|" + "#" * 250 + "| 3/2000 [07:12<80:01:10, 144.12s/it]"
    padded = "  0%|" + "#" * 150 + "| 3/2000 [07:12<80:01:10, 144.12s/it]" + " " * 60  # 250 bytes, and a match
    first_chunk = CHUNK // (len(short) + 1) + 1
    lines = [short] * first_chunk + [long_bar, padded, short] * 50
    scan = assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))
    assert scan.tallies["trl.slow_step_rate"].count == first_chunk + 2 * 50


def test_a_signature_cut_at_a_gap_is_confirmed_on_every_line_holding_what_follows_it(kb: KnowledgeBase, scanners: Any) -> None:
    # The translations of lego.verl_metric_score_max and hf.log_dict start after their last gap
    # (`critic/score/max:`, `'learning_rate': `): a line holding that but not what comes before the
    # gap is a hit of the translation that the exact form turns down, in the compiled module as in Python.
    matcher = scanners[1].matcher()
    for name in ("lego.verl_metric_score_max", "hf.log_dict"):
        index = matcher.names.index(name)
        assert not matcher.exact[index] and matcher.widened[index] and matcher.within[index] == 0
    metrics = "step:3 - actor/pg_loss:0.1 - critic/score/max:1.0 - timing_s/step:12.5"
    log_dict = "{'loss': 0.0793, 'grad_norm': 0.903, 'learning_rate': 1.00e-06, 'reward': 0.310, 'epoch': 0.02}"
    first_chunk = CHUNK // (len(metrics) + 1) + 1
    loose_only = ["val critic/score/max:1.0", "step:3 critic/score/max:1.0", "x {'loss': 0.1, 'grad_norm': 0.2, 'learning_rate': 1e-06", "'learning_rate': 1e-06"]
    lines = [metrics] * first_chunk + [*loose_only, metrics, log_dict] * 50
    scan = assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))
    assert scan.tallies["lego.verl_metric_score_max"].count == first_chunk + 50
    assert scan.tallies["hf.log_dict"].count == 50


def test_a_signature_matched_twice_on_a_line_counts_the_line_once(kb: KnowledgeBase, scanners: Any) -> None:
    # The scan database reports a signature where each match ends, not once at the line's end.
    loaded = "Model loading took 2.5 GiB and 3.0 seconds"
    twice = f"{loaded}; {loaded}"
    first_chunk = CHUNK // (len(loaded) + 1) + 1
    # Lines counted as they stand (in compiled code, from the second chunk on), then lines cut apart.
    scan = assert_same_scan(scanners, ("\n".join([loaded] * first_chunk + [twice] * 40) + "\n").encode("utf-8"))
    assert scan.tallies["vllm.model_loading_took"].count == first_chunk + 40
    lines = [loaded] * first_chunk + ["(pid=3) " + twice] * 40 + [twice + "\r" + loaded] * 40
    scan = assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))
    assert scan.tallies["vllm.model_loading_took"].count == first_chunk + 40 * 3  # the redrawn line: each redraw kept


def test_a_line_with_more_redraws_than_the_compiled_module_cuts_takes_the_full_path(kb: KnowledgeBase, scanners: Any) -> None:
    # Past 4096 redraws a line is not cut into segments but scanned whole, and Python cuts it.
    bar = " 40%|████      | 4/10 [00:04<00:06, 1.00s/it]"
    loaded = "Model loading took 2.5 GiB and 3.0 seconds"
    first_chunk = CHUNK // (len(loaded) + 1) + 1
    for redraws in (4000, 4100):  # 4003 parts, cut; 4103, not
        lines = [loaded] * first_chunk + ["\r".join([loaded] + [bar] * redraws + [loaded, loaded])] * 2
        scan = assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))
        assert scan.tallies["vllm.model_loading_took"].count == first_chunk + 2 * 3


def test_config_echoes_past_their_cap_and_lines_across_chunks(kb: KnowledgeBase, scanners: Any) -> None:
    lines = [f"step {i} max_completion_length={i % 7} {{'loss': 0.{i}, 'grad_norm': 0.5, 'learning_rate': 1e-06}}" for i in range(12_000)]
    lines += [" 40%|████      | 4/10 [00:04<00:06, 1.00s/it]"] * 20_000
    lines += ["x" * (CHUNK + 100) + " Model loading took 1.5 GiB and 2.0 seconds", "(pid=1) Model loading took 2.5 GiB and 3.0 seconds"]
    assert_same_scan(scanners, ("\n".join(lines)).encode("utf-8"))


def test_the_bench_logs_give_the_same_facts_and_report(kb: KnowledgeBase, scanners: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "run.py"
    namespace: dict[str, Any] = {"__name__": "bench"}
    exec(compile(bench.read_text(encoding="utf-8"), str(bench), "exec"), namespace)  # noqa: S102 - the bench script's generators
    for mode in ("sparse", "dense"):
        log = tmp_path / f"{mode}.log"
        namespace["write_log"](log, 3 * CHUNK, seed=5, mode=mode)
        assert_same_scan(scanners, log.read_bytes())
        monkeypatch.setenv("RLTRIAGE_SCAN", "reference")
        expected = report_of([str(log)], kb)
        monkeypatch.setenv("RLTRIAGE_SCAN", "aggregate")
        assert report_of([str(log)], kb) == expected
        assert report_of([str(log)], kb, jobs=2) == expected  # one file: its chunks classified in two threads


POOL: list[str] = []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, len(DECORATIONS) - 1), st.integers(1, 8)), min_size=1, max_size=60))
def test_any_mix_of_example_lines_gives_the_same_scan(scanners: Any, picks: list[tuple[int, int, int]]) -> None:
    if not POOL:
        POOL.extend(example_lines(rltriage.load_knowledge_base()))
    lines = [DECORATIONS[decoration](POOL[index % len(POOL)]) for index, decoration, repeat in picks for _ in range(repeat)]
    assert_same_scan(scanners, ("\n".join(lines) + "\n").encode("utf-8"))


def _paths_taken(scanner: Scanner, data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[FileScan, list[str]]:
    """The scan of `data`, and which path each chunk took, in order."""
    taken: list[str] = []
    full, aggregated = scanner._scan_chunk, scanner._aggregate_chunk

    def on_full(*args: Any) -> int:
        taken.append("full")
        return full(*args)

    def on_aggregated(*args: Any) -> int:
        taken.append("aggregated")
        return aggregated(*args)

    monkeypatch.setattr(scanner, "_scan_chunk", on_full)
    monkeypatch.setattr(scanner, "_aggregate_chunk", on_aggregated)
    return scanner.scan("run.log", InputKind.driver_log, io.BytesIO(data)), taken


def test_a_large_file_takes_the_aggregated_path_from_its_start_when_the_matcher_is_cached(
    kb: KnowledgeBase, scanners: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLTRIAGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLTRIAGE_NO_CACHE", raising=False)
    data = generated_log(kb, 5, 2 * CHUNK + 1000)
    expected = summary(scanners[0].scan("run.log", InputKind.driver_log, io.BytesIO(data)))

    # Nothing cached: the first chunks take the full path (the matcher is compiled only past 4 MiB).
    cold = Scanner(kb, config_keys(kb), aggregate=None)
    scan, taken = _paths_taken(cold, data, monkeypatch)
    assert summary(scan) == expected
    assert taken and set(taken) == {"full"}

    cold.matcher()  # compiled, and written to the disk cache
    assert list((tmp_path / "cache").glob("scan-*.hsdb"))
    warm = Scanner(kb, config_keys(kb), aggregate=None)  # a new process would find it there
    scan, taken = _paths_taken(warm, data, monkeypatch)
    assert summary(scan) == expected
    assert taken and set(taken) == {"aggregated"}

    # A file smaller than a chunk stays on the full path, cached matcher or not.
    scan, taken = _paths_taken(warm, data[: CHUNK // 2].rsplit(b"\n", 1)[0] + b"\n", monkeypatch)
    assert set(taken) == {"full"}


def test_signatures_no_database_states_are_confirmed_by_their_pattern_in_the_compiled_path(kb: KnowledgeBase, scanners: Any, native: str) -> None:
    # vllm.processed_prompts_done needs done == total (a backreference), _last_few the opposite: no
    # Hyperscan database says either, so each hit is confirmed with the signature's own pattern.
    done = "Processed prompts: 100%|##########| 64/64 [00:05<00:00, 12.00it/s, est. speed input: 10.00 toks/s]"
    rounded = "Processed prompts: 100%|##########| 1023/1024 [00:09<00:00, 99.00it/s]"  # tqdm rounds up to 100%
    redrawn = "Processed prompts:   0%|          | 0/64 [00:00<?, ?it/s]\rProcessed prompts:  50%|#####     | 32/64 [00:02<00:02, 12.00it/s]\r" + done
    lines = [done, rounded, redrawn, "(EngineCore_DP0 pid=7) " + done, "(EngineCore_DP0 pid=7) " + rounded] * 400
    data = ("\n".join(lines) + "\n").encode("utf-8")
    scan = assert_same_scan(scanners, data)
    assert scan.tallies["vllm.processed_prompts_done"].count == 3 * 400
    assert scan.tallies["vllm.processed_prompts_last_few"].count == 2 * 400
    if native == "compiled":
        # Once the tallies keep no more records, the compiled module settles every one of these lines.
        aggregated = scanners[1]
        matcher = aggregated.matcher()
        flags = aggregated._native_flags(matcher, InputKind.driver_log, scan.tallies)
        handed, counted, deferred, newlines = matcher.classify(data, flags, False)
        assert handed == [] and deferred == [] and newlines == data.count(b"\n")
        by_name = {matcher.names[index]: count for index, count, _last in counted}
        assert by_name["vllm.processed_prompts_done"] == 3 * 400
        assert by_name["vllm.processed_prompts_last_few"] == 2 * 400
        bars = [matcher.names.index("vllm.processed_prompts_done"), matcher.names.index("vllm.processed_prompts_last_few")]
        if _LINESCAN is not None and hasattr(_LINESCAN, "pattern"):
            # Built with PCRE2, the module confirms them itself: a thread's call (no Python) defers nothing.
            assert all(type(matcher._native_verifiers[index]).__name__ == "Pattern" for index in bars)
            assert matcher.classify(data, flags, False, True) == ([], counted, [], newlines)
        # Between the bars, lines with nothing a signature wants: the deferred lines are not the chunk's.
        mixed = ("\n".join(f"{line}\nworker {number} is still warming up" for number, line in enumerate(lines)) + "\n").encode("utf-8")
        saved = list(matcher._native_verifiers)
        try:
            for index in bars:  # as without PCRE2: the confirmation is a Python call
                matcher._native_verifiers[index] = partial(_pattern_confirms, matcher.signatures[index])
            handed, counted, deferred, _newlines = matcher.classify(mixed, flags, False)
            assert handed == [] and deferred == [] and {index for index, _count, _last in counted} >= set(bars)
            # Told not to call Python (a thread's call), it defers every bar's line instead ...
            handed, counted_ahead, deferred, _newlines = matcher.classify(mixed, flags, False, True)
            assert handed == [] and len(deferred) == len(lines)
            assert not set(bars) & {index for index, _count, _last in counted_ahead}
            # ... and classified again on their own, they come to what one call over the chunk counts.
            result = FileScan("run.log", InputKind.driver_log)
            result.tallies.update(scan.tallies)
            again_lines, again_counted = aggregated._classify_deferred(matcher, mixed, [], counted_ahead, deferred, InputKind.driver_log, result)
        finally:
            matcher._native_verifiers[:] = saved
        assert again_lines == []
        totals: dict[int, list[int]] = {}
        for index, count, last in again_counted:
            total = totals.setdefault(index, [0, 0])
            total[0] += count
            total[1] = max(total[1], last)
        assert sorted((index, count, last) for index, (count, last) in totals.items()) == sorted(counted)


def _require_pcre2() -> None:
    if _LINESCAN is None or not hasattr(_LINESCAN, "pattern"):
        if os.environ.get("RLTRIAGE_REQUIRE_PCRE2") == "1":
            pytest.fail("RLTRIAGE_REQUIRE_PCRE2=1 but rltriage.pipeline._linescan is built without PCRE2 (apt-get install libpcre2-dev, then reinstall)")
        pytest.skip("the compiled module is not built with PCRE2")


def test_pcre2_confirms_what_python_confirms_on_every_example_line_of_the_knowledge_base(kb: KnowledgeBase, scanners: Any, native: str) -> None:
    # A signature Hyperscan cannot state is confirmed by PCRE2 only where the two agree on its own
    # examples; here each such pattern is tried on every example line of every signature as well.
    if native != "compiled":
        pytest.skip("the Python path confirms with Python")
    _require_pcre2()
    matcher = scanners[1].matcher()
    lines = sorted({example.line for sig in kb.signatures.values() for example in sig.model.examples.match} | {line for sig in kb.signatures.values() for line in sig.model.examples.no_match})
    checked = 0
    for sig in matcher.signatures:
        pattern = _native_pattern(sig)
        if pattern is None:
            continue
        checked += 1
        for line in lines:
            assert pattern.search(line.encode("utf-8")) is (sig.regex.search(line) is not None), (sig.id, line)
    assert checked >= 10  # the vLLM bars, the checkpoint shards bar, the metric NaN, ...


def test_patterns_pcre2_reads_otherwise_are_confirmed_by_python() -> None:
    _require_pcre2()
    # PCRE2 10.42 reads `{,3}` as text where Python's regex reads a repeat: such a pattern stays Python's.
    assert _LINESCAN.pattern(r"ab{,3}c", False).search(b"abbc") is not True
    assert _PCRE2_DIFFERS.search(r"ab{,3}c") and _PCRE2_DIFFERS.search(r"end\Z") and _PCRE2_DIFFERS.search(r"(?a)\w+")
    assert _PCRE2_DIFFERS.search(r"(?:torch){e<=1}")  # the regex module's fuzzy match: PCRE2 would read text
    assert not _PCRE2_DIFFERS.search(r"(?P<total>\d+)/(?P=total)\b(?!\s*$) \{'loss' [^|\n]{0,40} \d{2,}")
    with pytest.raises(ValueError, match="PCRE2 refuses"):
        _LINESCAN.pattern(r"(?<=a+)b", False)  # a lookbehind of no fixed length: Python's regex takes it
