"""What normalisation takes off the start of a line before signatures are matched."""

from __future__ import annotations

import pytest

from rltriage.inputs.normalize import segments, strip_prefixes


@pytest.mark.parametrize(
    ("line", "text", "rank"),
    [
        # Collectors: kubectl logs --timestamps, docker logs -t, log exports (RFC 3339 with a zone).
        ("2025-05-14T09:13:14.220123456Z [rank3]: torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory.", 3),
        ("[2025-05-14T09:13:14+00:00] (WorkerDict pid=12, ip=10.0.0.1) boom", "boom", None),
        ("2025-05-14T09:13:14.5+0200\tboom", "boom", None),
        # A node's container log (CRI): stamp, stream, full/partial tag.
        ("2025-05-14T09:13:14.220123456Z stderr F [rank2]: boom", "boom", 2),
        # A program's own logger stamp is part of its message.
        ("2025-05-14 09:13:14,220 - INFO - trl.extras.vllm_client - Server is up!", "2025-05-14 09:13:14,220 - INFO - trl.extras.vllm_client - Server is up!", None),
        ("2025-05-14T09:13:14 no zone, no collector", "2025-05-14T09:13:14 no zone, no collector", None),
        # A log quoted in a Markdown reply; Python's prompt is not a quote.
        ("> [rank1]: RuntimeError: boom", "RuntimeError: boom", 1),
        (">>> import torch", ">>> import torch", None),
    ],
)
def test_launcher_and_collector_prefixes(line: str, text: str, rank: int | None) -> None:
    assert strip_prefixes(line)[:2] == (text, rank)


def test_an_anchored_frame_matches_behind_a_collector_stamp() -> None:
    (segment,) = segments('2025-05-14T09:13:04.220123Z   File "/x/requests/api.py", line 59, in request')
    assert segment.text == '  File "/x/requests/api.py", line 59, in request'
