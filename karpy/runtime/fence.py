"""The write fence: a leader may write (to the apiserver or to AWS) only while its lease is surely still its own.

controller-runtime stops a manager whose lease renewal failed for ``RenewDeadline`` and exits the process
(``pkg/manager/internal.go``, ``OnStoppedLeading``); client-go's elector never lets a lease be taken before
``observedTime + leaseDurationSeconds`` (``tools/leaderelection/leaderelection.go``). karpy closes the window between
those two: every successful acquire or renew grants the fence until ``attempt_start + renew_deadline`` (monotonic
seconds, taken *before* the request was sent), which is at least ``lease_duration - renew_deadline`` seconds before
any standby may take the lease. Every write checks the fence synchronously right before it is sent, so a leader
that was paused (SIGSTOP) or partitioned past its deadline refuses its own writes when it runs again: the monotonic
clock keeps running while a process is stopped.

The elector (:mod:`karpy.runtime.leader`) grants and revokes; the kube client and the AWS clients check.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class NotLeader(Exception):
    """A write was refused because this process does not (surely) hold the leader lease.

    Reconcilers must not retry it: the elector has lost (or never had) the lease and the process is about to exit
    (or is a standby that must not write).
    """

    def __init__(self, action: str, identity: str = "") -> None:
        self.action = action
        self.identity = identity
        who = f" ({identity})" if identity else ""
        super().__init__(f"not the leader{who}: refused {action}")


class Fence:
    """Whether this process may write now.

    ``deadline`` is on ``clock``'s monotonic scale (seconds); the fence holds while ``clock() < deadline``.
    A new fence holds nothing (a standby); :meth:`always` holds forever (``DISABLE_LEADER_ELECTION=true``).
    """

    def __init__(self, identity: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.identity = identity
        self.deadline = -math.inf
        self._clock = clock

    @classmethod
    def always(cls, identity: str = "") -> Fence:
        """A fence that always holds: leader election is disabled, this process is the only writer."""
        fence = cls(identity)
        fence.deadline = math.inf
        return fence

    def grant(self, until: float) -> None:
        """Allow writes until the monotonic time ``until`` (seconds); never moves an earlier grant back."""
        self.deadline = max(self.deadline, until)

    def revoke(self) -> None:
        """Refuse every write from now on (leadership lost or released)."""
        self.deadline = -math.inf

    def holds(self) -> bool:
        """True while writes are allowed."""
        return self._clock() < self.deadline

    def check(self, action: str) -> None:
        """Raise :class:`NotLeader` unless writes are allowed; ``action`` names the write for the error and logs.

        Call it synchronously right before the request is sent (no ``await`` in between), so the check and the
        send happen in one step of the event loop.
        """
        if not self.holds():
            raise NotLeader(action, self.identity)
