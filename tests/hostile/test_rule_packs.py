"""Round 2: rule packs are inert. A pack cannot read files outside itself, and nothing its templates,
regexes, YAML or rule chains ask for can take more than bounded time or memory: each hostile pack is
loaded and run under a time bound and the 200 MB bound, with its one-line error or warning and the
exit code checked, and `rules lint` rejects every one of them with `file:line:col`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rltriage.kb.load import _display
from rltriage.kb.regexes import REGEX_TIMEOUT
from rltriage.tools.lint import lint

from .bounds import cli, report

MARK = "lab-mark 1"
SIGNATURE = """id: lab.mark
title: the lab's marker line
source: test
pattern: 'lab-mark (?P<n>\\d+)'
values: {n: int}
examples:
  match: ['lab-mark 1']
  no_match: ['nothing here']
"""
GOOD = "starting\n[rltriage] stage=first_generation_started step=0\ndone\n"


def rule(name: str, fix: str = "fix: nothing to do\n", when: str = "{all: [{hit: lab.mark}]}", extra: str = "") -> str:
    return (
        f"id: lab.{name}\ntitle: attack {name}\nrole: evidence\nsource: test\nbucket: cluster_infra\nissue: x\nreason: y\n"
        f"when: {when}\nthen: {{evidence: {{weight: 0.5}}}}\n{fix}{extra}"
    )


def make_pack(root: Path, rules: dict[str, str], signatures: dict[str, str] | None = None) -> Path:
    (root / "rules" / "lab").mkdir(parents=True, exist_ok=True)
    (root / "signatures" / "lab").mkdir(parents=True, exist_ok=True)
    for name, text in {"mark": SIGNATURE, **(signatures or {})}.items():
        (root / "signatures" / "lab" / f"{name}.yaml").write_text(text)
    for name, text in rules.items():
        (root / "rules" / "lab" / f"{name}.yaml").write_text(text)
    return root


def good_run(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(GOOD + MARK + "\n" + extra)
    return folder


def still_diagnosed(stdout: str, run: Path) -> dict:
    document = json.loads(stdout)
    assert document["boundary"]["last_completed"] == "first_generation_started"
    assert any(e["path"] == str(run / "train.log") for e in document["boundary"]["evidence"])
    return document


def lint_problems(pack: Path) -> list[str]:
    return [str(p) for p in lint([str(pack)], include_builtin=False)]


# --- files out of the pack ---------------------------------------------------------------------------


def test_template_symlinked_out_of_the_pack_is_refused(tmp_path: Path) -> None:
    pack = make_pack(tmp_path / "pack", {"leak": rule("leak", fix="fix_template: lab/leak.j2\n")})
    (pack / "templates" / "lab").mkdir(parents=True)
    (pack / "templates" / "lab" / "leak.j2").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "fifo")
    (pack / "templates" / "lab" / "wait.j2").symlink_to(tmp_path / "fifo")  # reading it would block
    run = good_run(tmp_path / "run")
    outcome = cli(["diagnose", "--rules-dir", str(pack), str(run)], seconds=30).check(3, 30)
    report("template symlinked to /etc/passwd", outcome)
    leak = _display(pack / "templates" / "lab" / "leak.j2")
    wait = _display(pack / "templates" / "lab" / "wait.j2")
    assert outcome.stderr.splitlines() == [
        f"{leak}:1:1: error[pack-file]: template file is a symbolic link out of its pack (to /etc/passwd)",
        f"{wait}:1:1: error[pack-file]: template file is a symbolic link out of its pack (to {tmp_path / 'fifo'})",
        "rltriage: knowledge base has 2 problem(s)",
    ]
    assert "root:" not in outcome.stdout + outcome.stderr
    assert [p.split(": error")[0] for p in lint_problems(pack)] == [f"{leak}:1:1", f"{wait}:1:1"]


def test_fix_template_must_name_a_file_inside_the_pack(tmp_path: Path) -> None:
    pack = make_pack(tmp_path / "pack", {"abs": rule("abs", fix="fix_template: /etc/passwd\n")})
    display = _display(pack / "rules" / "lab" / "abs.yaml")
    assert f"{display}:10:1: error[unknown-template]: template '/etc/passwd' must be a path inside a templates folder" in lint_problems(pack)


# --- templates ---------------------------------------------------------------------------------------

TEMPLATE_ATTACKS = {
    "strmul": ("\"{{ 'a' * 10**9 }}\"", "repeating a sequence of 1 1000000000 times"),
    "power": ("\"{{ 9**(9**10) }}\"", "9 ** 3486784401 is larger than 4096 bits"),
    "loops": ("\"{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}x\"", "template took more than 2 s of processor time"),
    "lipsum": ("\"{{ lipsum(100000) }}\"", "'lipsum' is undefined"),
    "center": ("\"{{ 'a'|center(1000000000) }}\"", "filter center: 1000000000 is larger than 10000"),
    "width": ("\"{{ '%1000000000d'|format(1) }}\"", "filter format: a field width or precision larger than 9999 (or given as *)"),
    "doubling": ("\"{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}\"", "template used more than 32 MiB"),
    "mapped": ("\"{{ range(10000)|map('center', 9999)|list|length }}\"", "template used more than 32 MiB"),
}


def test_template_attacks_fail_fast_and_the_run_is_still_diagnosed(tmp_path: Path) -> None:
    rules = {name: rule(name, fix=f"fix: {source}\n") for name, (source, _message) in TEMPLATE_ATTACKS.items()}
    # Constant folding used to compute this while the pack loaded.
    rules["folded"] = rule("folded", when="{all: [{hit: lab.mark}]}", extra="").replace("when: {all: [{hit: lab.mark}]}", "when: {all: [{hit: lab.mark}], test: ['9**(9**10) > 1']}")
    pack = make_pack(tmp_path / "pack", rules)
    run = good_run(tmp_path / "run")
    outcome = cli(["diagnose", "--format", "json", "--rules-dir", str(pack), str(run)], seconds=60).check(0, 60)
    report("template attacks", outcome)
    expected = {
        f"rltriage: warning: {_display(pack / 'rules' / 'lab' / (name + '.yaml'))}: fix template failed to render: {message}"
        for name, (_source, message) in TEMPLATE_ATTACKS.items()
    }
    assert set(outcome.warnings) == expected and len(outcome.warnings) == len(expected)
    document = still_diagnosed(outcome.stdout, run)
    fired = {c["rule"] for c in document["causes"]}
    assert {f"lab.{name}" for name in TEMPLATE_ATTACKS} <= fired and "lab.folded" not in fired  # its test cannot be computed: false
    problems = lint_problems(pack)
    for name, (_source, message) in TEMPLATE_ATTACKS.items():
        display = _display(pack / "rules" / "lab" / f"{name}.yaml")
        assert any(p.startswith(f"{display}:10:1: error[template]: does not render with the rule's fields: ") and message in p for p in problems), (name, problems)


# --- YAML and regexes --------------------------------------------------------------------------------


def test_yaml_alias_bomb_in_a_rule_file(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    pack = make_pack(tmp_path / "pack", {"bomb": rule("bomb") + "\n".join(lines) + "\n"})
    outcome = cli(["diagnose", "--rules-dir", str(pack), str(good_run(tmp_path / "run"))], seconds=30).check(3, 30)
    report("YAML alias bomb in a rule file", outcome)
    display = _display(pack / "rules" / "lab" / "bomb.yaml")
    message = f"{display}:20:5: error[yaml]: the file expands to more than 100000 values (an alias used inside an alias, over and over?)"
    assert outcome.stderr.splitlines() == [message, "rltriage: knowledge base has 1 problem(s)"]
    assert lint_problems(pack) == [message]


def test_regex_that_takes_gigabytes_to_compile(tmp_path: Path) -> None:
    bomb = SIGNATURE.replace("lab.mark", "lab.bomb").replace("'lab-mark (?P<n>\\d+)'", "'(?:(?:(?:a{1000}){1000}){1000})x'").replace("values: {n: int}\n", "")
    pack = make_pack(tmp_path / "pack", {"uses": rule("uses", when="{all: [{hit: lab.bomb}]}")}, {"bomb": bomb})
    outcome = cli(["diagnose", "--rules-dir", str(pack), str(good_run(tmp_path / "run"))], seconds=30).check(3, 30)
    report("regex compile bomb", outcome)
    display = _display(pack / "signatures" / "lab" / "bomb.yaml")
    assert f"{display}:4:1: error[bad-regex]: nested counted repeats multiply to 1000000000, more than 10000" in outcome.stderr.splitlines()
    assert f"{display}:4:1: error[bad-regex]: nested counted repeats multiply to 1000000000, more than 10000" in lint_problems(pack)


def test_invalid_matches_pattern_is_a_load_error(tmp_path: Path) -> None:
    pack = make_pack(tmp_path / "pack", {"flag": rule("flag", when="{all: [{fact: hit, where: {text: {matches: 'abc(?i)def'}}}]}")})
    outcome = cli(["diagnose", "--rules-dir", str(pack), str(good_run(tmp_path / "run"))], seconds=30).check(3, 30)
    display = _display(pack / "rules" / "lab" / "flag.yaml")
    message = (
        f"{display}:8:41: error[bad-regex]: matches: global flags not at the start of the expression at position 3: "
        "put inline flags such as (?i) at the start, or use (?i:...)"
    )
    assert outcome.stderr.splitlines() == [message, "rltriage: knowledge base has 1 problem(s)"]
    assert lint_problems(pack) == [message]


def test_slow_matches_pattern_times_out_once_per_run(tmp_path: Path) -> None:
    pack = make_pack(tmp_path / "pack", {"slow": rule("slow", when="{all: [{fact: hit, where: {text: {matches: '(a|aa)+$'}}}]}")})
    run = good_run(tmp_path / "run")
    for i in range(30):  # thirty hit facts whose text makes the pattern backtrack
        (run / f"rank{i}.log").write_text(f"{MARK} {'a' * 40}!\n")
    outcome = cli(["diagnose", "--format", "json", "--rules-dir", str(pack), str(run)], seconds=30).check(0, 30)
    report("slow matches: pattern over 30 facts", outcome)
    display = _display(pack / "rules" / "lab" / "slow.yaml")
    assert outcome.warnings == [f"rltriage: warning: {display}: rule lab.slow: text matches (a|aa)+$: gave up after {REGEX_TIMEOUT}s; disabled for the rest of the run"]
    assert outcome.seconds < 30 * REGEX_TIMEOUT  # not once per fact
    still_diagnosed(outcome.stdout, run)
    assert any(p.startswith(f"{display}:8:41: error[slow-regex]:") for p in lint_problems(pack))


def test_slow_signature_is_disabled_for_the_run_with_one_warning(tmp_path: Path) -> None:
    slow = SIGNATURE.replace("lab.mark", "lab.slow").replace("'lab-mark (?P<n>\\d+)'", "'Watchdog caught((a|aa)+)!'").replace("values: {n: int}\n", "")
    slow = slow.replace("match: ['lab-mark 1']", "match: ['Watchdog caughtaa!']")
    pack = make_pack(tmp_path / "pack", {"slow": rule("slow", when="{all: [{hit: lab.slow}]}")}, {"slow": slow})
    run = good_run(tmp_path / "run")
    for i in range(4):  # 4 files of 40 lines: 160 lines that each take the pattern the full timeout
        (run / f"rank{i}.log").write_text(("Watchdog caught" + "a" * 40 + "\n") * 40)
    outcome = cli(["diagnose", "--format", "json", "--rules-dir", str(pack), str(run)], seconds=30).check(0, 30)
    report("slow signature over 160 lines", outcome)
    assert outcome.warnings == [f"rltriage: warning: {run}/rank0.log: line 1: signature lab.slow gave up after {REGEX_TIMEOUT}s; disabled for the rest of the run"]
    assert outcome.seconds < 160 * REGEX_TIMEOUT / 4
    still_diagnosed(outcome.stdout, run)
    display = _display(pack / "signatures" / "lab" / "slow.yaml")
    assert any(p.startswith(f"{display}:4:1: error[slow-regex]:") for p in lint_problems(pack))


# --- rule chains -------------------------------------------------------------------------------------


def test_doubling_derive_chain_is_stopped_by_its_size_budget(tmp_path: Path) -> None:
    seed = "id: lab.seed\ntitle: seeds a text\nrole: derive\nsource: test\nwhen: {all: [{fact: run}]}\nthen: {derive: [{fact: grow, fields: {s: 'ab', n: 0}}]}\n"
    double = (
        "id: lab.double\ntitle: doubles it\nrole: derive\nsource: test\nwhen: {all: [{fact: grow, as: g}]}\n"
        "then: {derive: [{fact: grow, fields: {s: '{{ g.s ~ g.s }}', n: '{{ g.n + 1 }}'}}]}\n"
    )
    pack = make_pack(tmp_path / "pack", {"seed": seed, "double": double, "uses": rule("uses")})
    outcome = cli(["diagnose", "--rules-dir", str(pack), str(good_run(tmp_path / "run"))], seconds=30).check(3, 30)
    report("doubling derive chain", outcome)
    assert outcome.stderr.splitlines() == [
        "rltriage: derived facts hold more than 1 MiB of computed text: rule lab.double derives ever larger values; its chain does not reach a fixpoint"
    ]
    display = _display(pack / "rules" / "lab" / "double.yaml")
    assert f"{display}:6:61: error[growing-derive]: field 'n' of 'grow' is computed from facts that 'grow' itself leads to: the chain can grow without end" in lint_problems(pack)


@pytest.mark.parametrize("text", ["x: [" * 3000 + "]" * 3000, "a: 1\n" * 300_000])
def test_rule_files_nested_too_deep_or_too_large(tmp_path: Path, text: str) -> None:
    pack = make_pack(tmp_path / "pack", {"odd": text})
    display = _display(pack / "rules" / "lab" / "odd.yaml")
    problems = lint_problems(pack)
    assert problems in (
        [f"{display}:1:1: error[yaml]: nested more than 64 deep"],
        [f"{display}:1:1: error[too-large]: file is larger than 1 MiB"],
        [f"{display}:1:1: error[pack-file]: rule file is larger than 1 MiB"],
    ), problems
