"""Integration fixtures: karpy's CRDs and RBAC installed on the local cluster, and an admin client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import ROOT, apply, load_documents
from karpy.kube.client import KubeClient


@pytest.fixture(scope="session")
async def kube(local_cluster: Any) -> AsyncIterator[KubeClient]:
    """An admin client on the local cluster with karpy's CRDs and RBAC applied."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    docs = load_documents(ROOT / "manifests" / "crds")
    docs += [d for d in load_documents(ROOT / "manifests") if d["kind"] != "Deployment"]
    await apply(client, docs)
    yield client
    await client.close()
