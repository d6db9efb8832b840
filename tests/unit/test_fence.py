"""The write fence: grants, revocation and the synchronous check (no I/O, an injected clock)."""

from __future__ import annotations

import pytest

from karpy.runtime.fence import Fence, NotLeader


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_new_fence_refuses_writes() -> None:
    fence = Fence("a_1", clock=Clock())
    assert not fence.holds()
    with pytest.raises(NotLeader, match=r"not the leader \(a_1\): refused POST /x"):
        fence.check("POST /x")


def test_a_grant_holds_until_its_deadline_then_refuses() -> None:
    clock = Clock()
    fence = Fence(clock=clock)
    fence.grant(110.0)
    fence.check("create")
    clock.t = 109.999
    assert fence.holds()
    clock.t = 110.0
    assert not fence.holds()


def test_a_later_grant_never_shortens_an_earlier_one_but_revoke_does() -> None:
    clock = Clock()
    fence = Fence(clock=clock)
    fence.grant(120.0)
    fence.grant(110.0)
    clock.t = 115.0
    assert fence.holds()
    fence.revoke()
    assert not fence.holds()


def test_always_holds() -> None:
    assert Fence.always().holds()
