"""Root pytest configuration: the session-wide ``local_cluster`` for integration and e2e tests, and the check
that no test leaks asyncio tasks.

Only tests that request ``local_cluster`` (directly or through another fixture) start it; unit tests never
do. One cluster serves the whole session. The control-plane binaries are built (``e2e/cluster/build.sh``,
idempotent) during collection when a selected test needs the cluster, so a first-time build does not count
against any test's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio

CLUSTER_NAME = "karpy-test"


def _build_log(config: pytest.Config) -> Path:
    root = Path(str(config.rootpath)) / ".e2e-run"
    root.mkdir(exist_ok=True)
    return root / "build.log"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the control plane now if any selected test uses the local cluster."""
    if not any("local_cluster" in getattr(item, "fixturenames", ()) for item in items):
        return
    if config.option.collectonly:
        return
    from e2e.cluster.controlplane import ControlPlaneError, ensure_binaries

    # On failure the local_cluster fixture runs the build again and reports it on the tests that need it.
    with contextlib.suppress(ControlPlaneError):
        ensure_binaries(_build_log(config))


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[object]:
    """A local cluster (control plane + KWOK + moto + node agent), shared by the session.

    Attributes: ``kubeconfig`` (Path, admin), ``server`` (``https://127.0.0.1:<port>``), ``cluster_name``,
    ``aws_env`` (AWS_ENDPOINT_URL, credentials, region), ``workdir``, ``log`` (the supervisor's log; component
    logs in ``workdir/logs``), ``start_seconds``.

    ``aws_env`` is also put in this process's environment for the session, as moto's docs advise: AWS clients
    built in-process (aiobotocore's default credential chain) find moto's test credentials, and nothing can
    reach a real AWS account.

    Raises:
        e2e.cluster.launcher.ClusterStartError: it did not start (the log's tail is in the message).
    """
    from e2e.cluster import launcher
    from e2e.cluster.controlplane import ensure_binaries

    ensure_binaries(_build_log(pytestconfig))  # a no-op after collection built them
    workdir = tmp_path_factory.mktemp("local-cluster")
    timeout = float(os.environ.get("KARPY_CLUSTER_START_TIMEOUT", "180"))
    cluster = launcher.start(workdir, CLUSTER_NAME, timeout=timeout)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in cluster.aws_env.items():
                patch.setenv(key, value)
            yield cluster
    finally:
        cluster.stop()


# --- leaked asyncio tasks ---------------------------------------------------------------------------------------

CLUSTER_MARKERS = ("integration", "e2e")


def _runner_of(request: pytest.FixtureRequest) -> asyncio.Runner | None:
    """The pytest-asyncio runner an async test runs on; None for a sync test.

    pytest-asyncio (``[tool.pytest.ini_options]``: ``asyncio_mode = "auto"``, test loop scope ``session`` unless a
    ``@pytest.mark.asyncio(loop_scope=...)`` says otherwise) keeps one ``asyncio.Runner`` per loop scope in a
    fixture named ``_<scope>_scoped_runner``. Requesting it here also orders it before this fixture, so a
    function-scoped loop is still open (not yet closed, which would cancel what is left) when the check runs.
    """
    if not pytest_asyncio.is_async_test(request.node):
        return None
    marker = request.node.get_closest_marker("asyncio")
    scope = (marker.kwargs.get("loop_scope") if marker else None) or request.config.getini(
        "asyncio_default_test_loop_scope"
    )
    runner = request.getfixturevalue(f"_{scope}_scoped_runner")
    assert isinstance(runner, asyncio.Runner)
    return runner


async def _cancel(tasks: set[asyncio.Task[object]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(autouse=True)
def no_leaked_tasks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail an async test that leaves tasks pending on its event loop when it (and its fixtures) end.

    The tasks pending before the test's function-scoped fixtures are set up are the baseline: those of
    session-, module- and class-scoped fixtures (set up first) and pytest-asyncio's own are never counted, so
    only what the test and its function-scoped fixtures started is checked — on the shared session loop this
    repository runs tests on as on a function-scoped one. Left running, such a task keeps working during the
    next test on the shared loop (writes to fakes, log lines, state changes) or is cancelled silently when a
    function-scoped loop closes. Leaked tasks are cancelled (and awaited) before the failure is reported.

    Tests that use the local cluster (``integration``/``e2e`` markers, or the ``local_cluster`` fixture) are not
    checked: they drive long-lived operators, informers and watches shared across a module or the session, which
    outlive single tests by design and are stopped by their own fixtures.
    """
    item = request.node
    uses_cluster = "local_cluster" in item.fixturenames or any(item.get_closest_marker(m) for m in CLUSTER_MARKERS)
    runner = None if uses_cluster else _runner_of(request)
    if runner is None:
        yield
        return
    loop = runner.get_loop()
    before = asyncio.all_tasks(loop)
    yield
    leaked = {t for t in asyncio.all_tasks(loop) - before if not t.done()}
    if leaked:
        names = sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in leaked)
        runner.run(_cancel(leaked))
        message = f"{len(leaked)} asyncio task(s) still pending when the test ended: {'; '.join(names)}"
        pytest.fail(message)
