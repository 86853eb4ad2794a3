"""rltriage — why an RL post-training run hung at step 0, ran out of memory or failed at start-up.

The public API is small and never prints or exits:

    >>> import rltriage
    >>> diagnosis = rltriage.diagnose(["runs/2024-05-01"])
    >>> diagnosis.primary_bucket, [c.rule for c in diagnosis.causes]
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import InferenceError, InputError, KnowledgeBaseError, Problem  # noqa: E402
from .load import KnowledgeBase, load_knowledge_base  # noqa: E402
from .pipeline import diagnose, preflight  # noqa: E402
from .result import Cause, Diagnosis, Evidence  # noqa: E402

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
]
