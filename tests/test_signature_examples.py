"""Each signature's own examples, matched through the real scanner (prefilter, normaliser, regex)."""

from __future__ import annotations

import pytest

import rltriage
from rltriage import KnowledgeBase
from rltriage.tools.expectations import check_signature_examples

SIGNATURES = sorted(rltriage.load_knowledge_base().signatures)


@pytest.mark.parametrize("sig_id", SIGNATURES)
def test_signature_examples(sig_id: str, kb: KnowledgeBase) -> None:
    problems = check_signature_examples(kb.signatures[sig_id], kb)
    assert not problems, "\n".join(str(p) for p in problems)


@pytest.mark.parametrize("sig_id", SIGNATURES)
def test_signature_has_a_prefilter_literal(sig_id: str, kb: KnowledgeBase) -> None:
    assert kb.signatures[sig_id].literals, f"{sig_id}: no literal could be derived; add `literals:`"
