"""``karpy run`` cannot reach or use the apiserver: one line on stderr, a distinct exit code, never a traceback.

Each failure is produced for real, no cluster needed: a kubeconfig naming a closed port (connection refused), a
host that does not resolve (DNS), a plain-HTTP server behind an https:// address (TLS), and a local HTTP server
answering 401/403 on ``/version`` (credentials refused). Exit codes: :mod:`karpy.cli.startup`.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from karpy.cli import startup
from karpy.kube.errors import ApiError
from karpy.settings import StartupError
from tests.unit.test_faults_startup import one_line, run_karpy


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]\n'
        "users: [{name: u, user: {token: not-a-valid-token}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    return path


def run_with(path: Path) -> tuple[int, str]:
    result = run_karpy({"KUBECONFIG": str(path), "HEALTH_PROBE_PORT": "0"})
    return result.returncode, one_line(result)


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_server(status: int) -> Iterator[int]:
    """A local HTTP server answering every GET with ``status`` and a Kubernetes Status body."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (
                '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"denied",'
                f'"reason":"{"Unauthorized" if status == 401 else "Forbidden"}","code":{status}}}'
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def unauthorized() -> Iterator[int]:
    yield from http_server(401)


@pytest.fixture
def forbidden() -> Iterator[int]:
    yield from http_server(403)


def test_connection_refused_exits_4(tmp_path: Path, closed_port: int) -> None:
    code, line = run_with(kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port}"))
    assert code == startup.EXIT_APISERVER_UNREACHABLE == 4
    assert line.startswith(f"karpy: cannot start: KUBECONFIG={tmp_path / 'kubeconfig'}: apiserver "), line
    assert f"127.0.0.1:{closed_port}" in line and "did not answer" in line
    assert line.endswith("(is the apiserver up and the kubeconfig's server address and CA right?)")


def test_unresolvable_host_exits_4(tmp_path: Path) -> None:
    code, line = run_with(kubeconfig(tmp_path, "https://karpy-no-such-host.invalid:6443"))
    assert code == 4
    assert "karpy-no-such-host.invalid" in line and "did not answer" in line


def test_tls_failure_exits_4(tmp_path: Path, unauthorized: int) -> None:
    """https:// to a plain-HTTP server: the TLS handshake fails before any answer."""
    code, line = run_with(kubeconfig(tmp_path, f"https://127.0.0.1:{unauthorized}"))
    assert code == 4
    assert "did not answer" in line


def test_unauthorized_exits_5(tmp_path: Path, unauthorized: int) -> None:
    code, line = run_with(kubeconfig(tmp_path, f"http://127.0.0.1:{unauthorized}"))
    assert code == startup.EXIT_CREDENTIALS_REJECTED == 5
    assert "401" in line and line.endswith("(the kubeconfig's credentials were refused)"), line


def test_forbidden_exits_5(tmp_path: Path, forbidden: int) -> None:
    code, line = run_with(kubeconfig(tmp_path, f"http://127.0.0.1:{forbidden}"))
    assert code == 5
    assert "403" in line


def _raised_in(context: BaseException, text: str) -> StartupError:
    """A StartupError raised while handling ``context`` with ``from None``, as the operator raises it."""
    try:
        try:
            raise context
        except BaseException:
            raise StartupError(text) from None
    except StartupError as err:
        return err


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (StartupError("KUBECONFIG=/x: no such file"), 3),
        (StartupError("KUBECONFIG: not set, not in a pod, and ~/.kube/config does not exist"), 3),
        (_raised_in(ValueError("bad yaml"), "KUBECONFIG=/x: cannot load: bad yaml"), 3),
        (_raised_in(OSError("refused"), "KUBECONFIG=/x: apiserver https://h did not answer: refused"), 4),
        (_raised_in(ApiError(503, "ServiceUnavailable", "x"), "KUBECONFIG=/x: apiserver h did not answer: 503"), 4),
        (_raised_in(ApiError(401, "Unauthorized", "x"), "KUBECONFIG=/x: apiserver h did not answer: 401"), 5),
        (_raised_in(ApiError(403, "Forbidden", "x"), "KUBECONFIG=/x: apiserver h did not answer: 403"), 5),
        (StartupError("METRICS_PORT=8080: cannot listen: Address already in use"), 2),
        (StartupError("INTERRUPTION_QUEUE=q: GetQueueUrl failed"), 2),
    ],
)
def test_exit_code_per_kind_of_failure(err: StartupError, code: int) -> None:
    assert startup.exit_code(err) == code
    assert startup.message(err).startswith(f"karpy: cannot start: {err}")
