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
from karpy.operator import _kubeconfig_source, _unanswered
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


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (_unanswered("KUBECONFIG=/x", "https://h", OSError("refused")), 4),
        (_unanswered("KUBECONFIG=/x", "h", ApiError(503, "ServiceUnavailable", "x")), 4),
        (_unanswered("KUBECONFIG=/x", "h", TimeoutError()), 4),
        (_unanswered("KUBECONFIG=/x", "h", ApiError(401, "Unauthorized", "x")), 5),
        (_unanswered("KUBECONFIG=/x", "h", ApiError(403, "Forbidden", "x")), 5),
        (StartupError("METRICS_PORT=8080: cannot listen: Address already in use"), 2),
        (StartupError("INTERRUPTION_QUEUE=q: GetQueueUrl failed"), 2),
    ],
)
def test_exit_code_per_kind_of_failure(err: StartupError, code: int) -> None:
    assert startup.exit_code(err) == code
    assert startup.message(err).startswith(f"karpy: cannot start: {err}")


def test_kubeconfig_failures_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The kubeconfig checks raise with the kubeconfig exit code: KUBECONFIG naming no file, none at all."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(StartupError) as missing:
        _kubeconfig_source()
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(StartupError) as unset:
        _kubeconfig_source()
    assert startup.exit_code(missing.value) == startup.exit_code(unset.value) == startup.EXIT_KUBECONFIG == 3
