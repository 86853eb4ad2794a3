"""The check registry, and the role checks lint runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import rltriage
import rltriage.tools.lint  # noqa: F401 - registers lint's checks
from rltriage.base.vocabulary import CAUSE_ROLES, Role
from rltriage.kb.checks import CHECKS, check_roles
from rltriage.kb.load import load_knowledge_base

SIGNATURE = """\
id: lab.msg
title: A message
source: test
pattern: 'lab message (?P<n>\\d+)'
examples:
  match: ['lab message 1']
  no_match: ['other']
"""
CAUSE = """\
id: lab.{name}
title: A cause
role: {role}
source: test
bucket: config_error
blocking: {blocking}
when:
  all:
    - hit: lab.msg
then:
  evidence:
    weight: 0.5
fix: fix it
"""
GUARD = """\
id: lab.{name}
title: A guard
role: {role}
source: test
when:
  all:
    - hit: lab.msg
then:
  derive:
    - fact: lab_seen
"""


def _codes(tmp_path: Path, **rules: str) -> list[tuple[str, str]]:
    (tmp_path / "signatures" / "lab").mkdir(parents=True)
    (tmp_path / "rules" / "lab").mkdir(parents=True)
    (tmp_path / "signatures" / "lab" / "msg.yaml").write_text(SIGNATURE)
    for name, text in rules.items():
        (tmp_path / "rules" / "lab" / f"{name}.yaml").write_text(text)
    kb = load_knowledge_base([tmp_path], include_builtin=False)
    return sorted((p.path.rsplit("/", 1)[-1], p.message) for p in check_roles(kb))


def test_the_registry_holds_load_and_lint_checks() -> None:
    assert CHECKS["load"] and check_roles in CHECKS["lint"]
    assert len(CHECKS["lint"]) >= 9  # lint's own checks register themselves too


def test_only_contracts_block(tmp_path: Path) -> None:
    found = _codes(tmp_path, a=CAUSE.format(name="a", role="evidence", blocking="true"), b=CAUSE.format(name="b", role="contract", blocking="true"))
    assert found == [("a.yaml", "blocking: true needs role contract, not evidence")]


def test_roles_must_do_what_they_name(tmp_path: Path) -> None:
    found = _codes(
        tmp_path,
        a=GUARD.format(name="a", role="guard"),
        b=GUARD.format(name="b", role="stage"),
        c=GUARD.format(name="c", role="evidence"),
        d=CAUSE.format(name="d", role="support", blocking="false"),
        e=GUARD.format(name="e", role="derive"),
        f=CAUSE.format(name="f", role="generic", blocking="false"),
    )
    messages = dict(found)
    assert messages["a.yaml"] == "a guard must suppress a bucket or a cause"
    assert messages["b.yaml"] == "a stage rule must derive stage_seen or stage facts"
    assert messages["c.yaml"].startswith("a evidence rule must conclude a cause")
    assert messages["d.yaml"].startswith("the rule concludes a cause; its role must be evidence, contract, generic or fallback")
    assert "e.yaml" not in messages and "f.yaml" not in messages  # generic is reserved, and accepted


def test_an_unknown_role_is_a_schema_error(tmp_path: Path) -> None:
    with pytest.raises(rltriage.KnowledgeBaseError) as caught:
        _codes(tmp_path, a=GUARD.format(name="a", role="helper"))
    assert [p.code for p in caught.value.problems] == ["bad-enum"]


def test_the_shipped_rules_use_their_roles() -> None:
    kb = rltriage.load_knowledge_base()
    roles = {loaded.model.role for loaded in kb.rules}
    assert roles == set(Role)
    assert all(r.model.role is Role.contract for r in kb.rules if r.model.blocking)
    assert all(r.model.concludes == (r.model.role in CAUSE_ROLES) for r in kb.rules)
    assert list(check_roles(kb)) == []  # the whole of lint runs in tests/test_kb_meta.py
