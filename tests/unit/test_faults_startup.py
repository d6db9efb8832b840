"""Bad settings and a broken interruption queue: one line naming the variable and exit 2, never a traceback;
a queue that later becomes unreadable shows in readiness and a metric; an unhandled message's reason is
bounded in the log."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from karpy.aws.messages import parse
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import CloudProviderError, InterruptionKind, QueuedMessage
from karpy.controllers import interruption as interruption_mod
from karpy.controllers.interruption import Interruption
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.metrics import INTERRUPTION_QUEUE_ERRORS, INTERRUPTION_QUEUE_HEALTHY
from karpy.runtime.singleton import SingletonController
from karpy.state.cluster import KINDS, ClusterState

ROOT = Path(__file__).resolve().parents[2]


def run_karpy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m karpy run`` from this worktree with ``env`` over a minimal environment."""
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    return subprocess.run(
        [sys.executable, "-m", "karpy", "run"],
        env={**base, "HOME": "/nonexistent-home", "CLUSTER_NAME": "c", "METRICS_PORT": "0", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The whole output, asserted to be exactly one line."""
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_missing_kubeconfig_is_one_line_and_exit_3() -> None:
    # Exit 3 (was 2): a kubeconfig failure has its own code since `karpy run` documents one per kind of failure.
    result = run_karpy({"KUBECONFIG": "/nonexistent/kubeconfig", "HEALTH_PROBE_PORT": "0"})
    assert result.returncode == 3
    line = one_line(result)
    assert line.startswith("karpy: cannot start: KUBECONFIG=/nonexistent/kubeconfig"), line


def test_no_kubeconfig_at_all_is_one_line_and_exit_3() -> None:
    result = run_karpy({"HEALTH_PROBE_PORT": "0"})
    assert result.returncode == 3
    assert "KUBECONFIG" in one_line(result)


def test_unreadable_kubeconfig_is_one_line_and_exit_3(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [\n")
    result = run_karpy({"KUBECONFIG": str(bad), "HEALTH_PROBE_PORT": "0"})
    assert result.returncode == 3
    assert one_line(result).startswith(f"karpy: cannot start: KUBECONFIG={bad}: cannot load")


@pytest.mark.parametrize("variable", ["METRICS_PORT", "HEALTH_PROBE_PORT"])
def test_port_in_use_is_one_line_and_exit_2(variable: str, busy_port: int) -> None:
    env = {"KUBECONFIG": "/nonexistent/kubeconfig", "HEALTH_PROBE_PORT": "0", variable: str(busy_port)}
    result = run_karpy(env)
    assert result.returncode == 2
    assert one_line(result) == f"karpy: cannot start: {variable}={busy_port}: cannot listen: Address already in use"


class FlakyQueue:
    """Fails its first read, then answers; the third read ends the loop."""

    def __init__(self, ctl: list[Interruption]) -> None:
        self.ctl = ctl
        self.reads = 0
        self.seen: list[tuple[str, float]] = []

    async def receive(self) -> list[QueuedMessage]:
        self.reads += 1
        if self.reads > 1:
            self.seen.append((self.ctl[0].queue_error, INTERRUPTION_QUEUE_HEALTHY._value.get()))
        if self.reads == 1:
            raise CloudProviderError("ReceiveMessage 'q': Could not connect to the endpoint URL")
        if self.reads == 3:
            raise asyncio.CancelledError
        return []

    async def delete(self, receipt_handle: str) -> None:
        return None


def _interruption(state: ClusterState, queue: FlakyQueue) -> Interruption:
    """The interruption controller over ``queue`` (the apiserver and the cloud are fakes these tests never reach)."""
    kube = FakeKube()
    return Interruption(kube, state, FakeCloudProvider(), EventRecorder(kube), queue)


async def test_unreadable_queue_shows_in_readiness_and_metric_until_it_recovers() -> None:
    """A failed read sets ``queue_error`` (what /readyz reports), the gauge to 0 and counts an error; the next
    successful read (after the loop's backoff, 0 here) clears both."""
    state = ClusterState()
    for kind in KINDS:
        state.replace(kind, [])
    holder: list[Interruption] = []
    queue = FlakyQueue(holder)
    ctl = _interruption(state, queue)
    holder.append(ctl)
    errors = INTERRUPTION_QUEUE_ERRORS._value.get()
    with pytest.raises(asyncio.CancelledError):
        await SingletonController(ctl, base_delay=0.0, max_delay=0.0).run()
    assert queue.seen[0][0].startswith("ReceiveMessage 'q'") and queue.seen[0][1] == 0
    assert queue.seen[1] == ("", 1)
    assert INTERRUPTION_QUEUE_ERRORS._value.get() == errors + 1


def test_unhandled_message_reason_is_bounded() -> None:
    """A 250 KB detail-type (or any field) does not end up whole in the reason logged for an ignored message."""
    body = json.dumps({"version": "0", "source": "aws.ec2", "detail-type": "x" * 250_000, "detail": {}})
    msg = parse(body)
    assert msg.kind == "no_op"
    assert len(msg.reason) < 500
    health = json.dumps(
        {"version": "0", "source": "aws.health", "detail-type": "AWS Health Event", "detail": {"service": "y" * 9999}}
    )
    assert len(parse(health).reason) < 500


async def test_ignored_message_log_line_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the parser put in the reason, the log line carries at most REASON_MAX characters of it."""
    from karpy.cloudprovider.types import InterruptionMessage

    logged: list[dict[str, Any]] = []
    monkeypatch.setattr(interruption_mod.log, "info", lambda event, **kw: logged.append(kw))
    ctl = _interruption(ClusterState(), FlakyQueue([]))
    msg = QueuedMessage("m", "rh", InterruptionMessage(kind=InterruptionKind.NO_OP, reason="z" * 250_000))
    await ctl.handle(msg)
    assert len(logged[0]["reason"]) <= interruption_mod.REASON_MAX + 1


async def test_readyz_reports_why_it_is_not_ready() -> None:
    """/readyz answers 503 with the reason (e.g. the interruption queue unreadable), 200 once it clears."""
    import aiohttp

    from karpy.health import start_probe_server

    why = ["interruption queue 'q' unreadable: ReceiveMessage 'q': connection refused"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    runner = await start_probe_server(port, lambda: why[0], host="127.0.0.1")
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 503 and "unreadable" in await response.text()
            why[0] = ""
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
    finally:
        await runner.cleanup()


async def test_metrics_and_probes_share_one_server_each_on_its_own_port() -> None:
    """``/metrics`` (Prometheus text) answers on the metrics socket and the probes on theirs, from one aiohttp
    server; neither path answers on the other's port."""
    import aiohttp

    from karpy.health import listen, start_server

    probes, metrics = listen(0, "127.0.0.1"), listen(0, "127.0.0.1")
    probe_port, metrics_port = probes.getsockname()[1], metrics.getsockname()[1]
    runner = await start_server(lambda: "", probes=probes, metrics=metrics)
    try:
        async with aiohttp.ClientSession() as session:

            async def get(port: int, path: str) -> tuple[int, str]:
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    return response.status, await response.text()

            status, text = await get(metrics_port, "/metrics")
            assert status == 200 and "# TYPE karpenter_cluster_state_synced gauge" in text
            assert await get(probe_port, "/healthz") == (200, "ok")
            assert await get(probe_port, "/readyz") == (200, "ok")
            assert (await get(probe_port, "/metrics"))[0] == 404
            assert (await get(metrics_port, "/readyz"))[0] == 404
    finally:
        await runner.cleanup()
