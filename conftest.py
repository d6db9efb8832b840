"""Root pytest configuration: the session-wide ``local_cluster`` for integration and e2e tests.

Only tests that request ``local_cluster`` (directly or through another fixture) start it; unit tests never
do. One cluster serves the whole session. The control-plane binaries are built (``e2e/cluster/build.sh``,
idempotent) during collection when a selected test needs the cluster, so a first-time build does not count
against any test's timeout.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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
