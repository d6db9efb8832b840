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

from karpy.kube.errors import ApiError
from karpy.settings import StartupError

EXIT_OK = 0
EXIT_LEADER_ELECTION_LOST = 1
EXIT_SETTINGS = 2
EXIT_KUBECONFIG = 3
EXIT_APISERVER_UNREACHABLE = 4
EXIT_CREDENTIALS_REJECTED = 5

_CREDENTIALS_STATUSES = (401, 403)


def exit_code(err: StartupError) -> int:
    """The exit code for a start-up failure :func:`karpy.operator.run` raised.

    The operator's kubeconfig checks name ``KUBECONFIG`` first in their message; a failed first request to the
    apiserver (``GET /version``) carries the client's exception as the error's context (``raise … from None`` keeps
    ``__context__``): an :class:`ApiError` 401/403 is rejected credentials, anything else there (aiohttp connection,
    DNS, TLS and timeout errors, another status) means the apiserver cannot be reached.
    """
    text = str(err)
    if "did not answer" in text:
        context = err.__context__
        if isinstance(context, ApiError) and context.status in _CREDENTIALS_STATUSES:
            return EXIT_CREDENTIALS_REJECTED
        return EXIT_APISERVER_UNREACHABLE
    if text.startswith("KUBECONFIG"):
        return EXIT_KUBECONFIG
    return EXIT_SETTINGS


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
    "EXIT_OK",
    "EXIT_SETTINGS",
    "exit_code",
    "message",
]
