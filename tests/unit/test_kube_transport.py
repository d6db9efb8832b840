"""karpy.kube.transport: kubernetes-asyncio's transport without its generated API and models (memory).

Import state is process-wide and the test process has long imported kubernetes-asyncio in full, so each check
runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    """Run ``code`` in a fresh interpreter from the repository root; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kube_client_imports_no_generated_api_or_model() -> None:
    out = run(
        """
        import sys
        import karpy.kube.client
        generated = [m for m in sys.modules if m.startswith(("kubernetes_asyncio.client.api.",
                     "kubernetes_asyncio.client.models.")) or m == "kubernetes_asyncio.client.api"]
        print(len(generated), "kubernetes_asyncio.client.api_client" in sys.modules,
              "kubernetes_asyncio.config.kube_config" in sys.modules)
        """
    )
    assert out.split() == ["0", "True", "True"]


def test_full_client_still_loads_on_demand_after_the_transport() -> None:
    out = run(
        """
        import karpy.kube.client
        import kubernetes_asyncio
        import kubernetes_asyncio.client as client
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.client.models import V1Pod
        from kubernetes_asyncio import config, watch
        print(client.V1Pod is V1Pod, CoreV1Api.__name__, client.ApiClient is karpy.kube.client._TRANSPORT.ApiClient,
              callable(config.load_kube_config), kubernetes_asyncio.__version__ != "", watch.Watch.__name__)
        """
    )
    assert out.split() == ["True", "CoreV1Api", "True", "True", "True", "Watch"]


def test_transport_leaves_an_already_imported_package_alone() -> None:
    out = run(
        """
        import kubernetes_asyncio, kubernetes_asyncio.client as client
        from karpy.kube.transport import DeferredPackage, load
        t = load()
        import sys
        print(any(isinstance(sys.modules[m], DeferredPackage) for m in list(sys.modules)),
              t.ApiClient is client.ApiClient, t.Configuration is client.Configuration)
        """
    )
    assert out.split() == ["False", "True", "True"]


def test_a_package_name_runs_the_init_once_and_a_missing_name_is_an_attribute_error() -> None:
    out = run(
        """
        import sys
        import karpy.kube.client
        pkg = sys.modules["kubernetes_asyncio"]
        before = type(pkg).__name__, "kubernetes_asyncio.client.models.v1_pod" in sys.modules
        version = pkg.__version__  # the top package's __init__ runs; the client package stays deferred
        after = type(pkg).__name__, type(pkg.client).__name__, "kubernetes_asyncio.client.models.v1_pod" in sys.modules
        print(*before, bool(version), *after, hasattr(pkg, "no_such_name"), pkg.client.V1Pod.__name__)
        """
    )
    assert out.split() == ["DeferredPackage", "False", "True", "module", "DeferredPackage", "False", "False", "V1Pod"]


@pytest.mark.asyncio
async def test_from_environment_loads_a_kubeconfig_through_the_transport(tmp_path: Path) -> None:
    from karpy.kube.client import KubeClient

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        textwrap.dedent(
            """
            apiVersion: v1
            kind: Config
            clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
            users: [{name: u, user: {token: secret-token}}]
            contexts: [{name: x, context: {cluster: c, user: u}}]
            current-context: x
            """
        )
    )
    client = await KubeClient.from_environment(str(kubeconfig))
    try:
        assert client.host == "https://127.0.0.1:6443"
        assert client._api.configuration.api_key["BearerToken"].endswith("secret-token")
    finally:
        await client.close()


async def test_from_environment_gives_requests_a_bounded_pool_and_watches_their_own(tmp_path: Path) -> None:
    from karpy.kube.client import REQUEST_CONNECTIONS, KubeClient

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    client = await KubeClient.from_environment(str(kubeconfig), user_agent="karpy/test")
    try:
        requests, watches = client._api, client._watch_api
        assert requests.rest_client.pool_manager.connector.limit == REQUEST_CONNECTIONS
        assert watches.rest_client.pool_manager.connector.limit == 0  # aiohttp: no limit
        assert requests.configuration is watches.configuration  # a refreshed token serves both
        assert requests.user_agent == watches.user_agent == "karpy/test"
    finally:
        await client.close()
    assert requests.rest_client.pool_manager.closed and watches.rest_client.pool_manager.closed


async def test_open_watches_do_not_hold_the_request_pool() -> None:
    """Three open watch streams and a request pool of one connection: the request is answered at once."""
    import asyncio

    from aiohttp import web
    from kubernetes_asyncio import client as k8s_client

    from karpy.kube.client import KubeClient
    from karpy.kube.resources import PODS

    streaming = asyncio.Event()
    release = asyncio.Event()
    opened = 0

    async def handle(request: web.Request) -> web.StreamResponse:
        nonlocal opened
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b'{"type": "BOOKMARK", "object": {}}\n')
            opened += 1
            if opened == 3:
                streaming.set()
            await release.wait()
            return response
        return web.json_response({"items": [], "metadata": {"resourceVersion": "7"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def api(limit: int) -> Any:
        configuration = k8s_client.Configuration()
        configuration.host = f"http://127.0.0.1:{port}"
        configuration.connection_pool_maxsize = limit
        return k8s_client.ApiClient(configuration=configuration)

    client = KubeClient(api(1), watch_api=api(0))

    async def watch() -> None:
        async for _ in client.stream_lines(PODS.path(), {"watch": "true"}, read_timeout=30):
            pass

    streams = [asyncio.ensure_future(watch()) for _ in range(3)]
    try:
        await asyncio.wait_for(streaming.wait(), 10)
        items, version = await asyncio.wait_for(client.list(PODS), 10)
        assert (items, version) == ([], "7")
    finally:
        release.set()
        await asyncio.gather(*streams, return_exceptions=True)
        await client.close()
        await runner.cleanup()
