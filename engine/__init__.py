"""rltriage — why an RL post-training run hung at step 0, ran out of memory or failed at start-up.

The public API is small and never prints or exits:

    >>> import rltriage
    >>> diagnosis = rltriage.diagnose(["runs/2024-05-01"])
    >>> diagnosis.primary_bucket, [c.rule for c in diagnosis.causes]
    >>> page = rltriage.report(["runs/2024-05-01"], "html")   # with the per-process timeline
    >>> text = rltriage.render(diagnosis, "markdown")          # a diagnosis in hand, any format
"""

from __future__ import annotations

from ._version import __version__
from .base.contract import Cause, Diagnosis, Evidence
from .base.errors import InferenceError, InputError, KnowledgeBaseError, Problem
from .kb.knowledge import KnowledgeBase
from .kb.load import load_knowledge_base
from .pipeline.run import diagnose, preflight, render, report

__all__ = [
    "Cause",
    "Diagnosis",
    "Evidence",
    "InferenceError",
    "InputError",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "Problem",
    "__version__",
    "diagnose",
    "load_knowledge_base",
    "preflight",
    "render",
    "report",
]
