"""Integration fixtures: karpy's CRDs and RBAC installed on the local cluster, and an admin client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import apply, install_documents
from karpy.kube.client import KubeClient


@pytest.fixture(scope="session")
async def kube(local_cluster: Any) -> AsyncIterator[KubeClient]:
    """An admin client on the local cluster with karpy's CRDs and RBAC applied."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    await apply(client, install_documents())
    yield client
    await client.close()
