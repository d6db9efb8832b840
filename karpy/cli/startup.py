"""Exit codes of ``karpy run`` and the start-up failure each one means.

Karpenter exits 2 on any start-up failure (a Go panic from ``lo.Must``). karpy prints one line on stderr instead of
a traceback and uses a distinct code per kind of failure, so a wrapper (or a human reading ``kubectl describe``'s
"Last State: Terminated, Exit Code") can tell a configuration error from an apiserver that is down:

====  ===========================================================================================================
code  meaning
====  ===========================================================================================================
0     stopped by SIGTERM/SIGINT
1     leader election lost (the process exits, as controller-runtime's manager does, and is restarted)
2     invalid or unsupported settings, or another start-up check failed (a port in use, the interruption queue,
      the cluster endpoint, the log paths)
3     no usable kubeconfig: ``KUBECONFIG`` names no file, none is found, or it does not load
4     the apiserver cannot be reached: connection refused, DNS, TLS, a timeout or a 5xx on ``/version``
5     the apiserver refused karpy's credentials: 401 Unauthorized or 403 Forbidden
====  ===========================================================================================================
"""

from __future__ import annotations

from karpy.settings import (
    EXIT_APISERVER_UNREACHABLE,
    EXIT_CREDENTIALS_REJECTED,
    EXIT_KUBECONFIG,
    EXIT_SETTINGS,
    StartupError,
)

EXIT_LEADER_ELECTION_LOST = 1


def exit_code(err: StartupError) -> int:
    """The exit code for a start-up failure :func:`karpy.operator.run` raised: the one its raiser set
    (``StartupError.exit_code``; the kubeconfig and apiserver checks of ``karpy.operator._connect`` set 3-5)."""
    return err.exit_code


def message(err: StartupError, prefix: str = "karpy: cannot start") -> str:
    """The one line printed for a start-up failure (``prefix: error``), with what to check for the apiserver kinds."""
    code = exit_code(err)
    hint = {
        EXIT_APISERVER_UNREACHABLE: " (is the apiserver up and the kubeconfig's server address and CA right?)",
        EXIT_CREDENTIALS_REJECTED: " (the kubeconfig's credentials were refused)",
    }.get(code, "")
    return f"{prefix}: {err}{hint}"


__all__ = [
    "EXIT_APISERVER_UNREACHABLE",
    "EXIT_CREDENTIALS_REJECTED",
    "EXIT_KUBECONFIG",
    "EXIT_LEADER_ELECTION_LOST",
    "EXIT_SETTINGS",
    "exit_code",
    "message",
]
