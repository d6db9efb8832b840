"""Kubernetes ``ToleratesTaint`` and which effects block scheduling."""

from __future__ import annotations

import pytest

from karpy.scheduling.model import Taint, Toleration
from karpy.scheduling.taints import format_taint, tolerates, untolerated

GPU = Taint("dedicated", "NoSchedule", "gpu")


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        (Toleration("dedicated", "Equal", "gpu", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "gpu"), True),
        (Toleration("dedicated", "", "gpu"), True),
        (Toleration("dedicated", "Equal", "cpu", "NoSchedule"), False),
        (Toleration("dedicated", "Exists"), True),
        (Toleration("dedicated", "Exists", effect="NoExecute"), False),
        (Toleration("", "Exists"), True),
        (Toleration("other", "Exists"), False),
        (Toleration("dedicated", "Lt", "gpu"), False),
    ],
)
def test_tolerates(toleration: Toleration, ok: bool) -> None:
    assert tolerates([toleration], GPU) is ok


def test_prefer_no_schedule_never_blocks_but_no_execute_does() -> None:
    soft = Taint("soft", "PreferNoSchedule")
    hard = Taint("hard", "NoExecute", "1")
    assert untolerated([], [soft]) is None
    assert untolerated([], [soft, hard]) == hard
    assert untolerated([Toleration("hard", "Equal", "1")], [soft, hard]) is None


def test_format() -> None:
    assert format_taint(GPU) == "dedicated=gpu:NoSchedule"
    assert format_taint(Taint("x", "NoExecute")) == "x:NoExecute"
