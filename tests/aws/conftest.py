"""A real moto server on 127.0.0.1 for the AWS provider tests, seeded once per session (no Kubernetes needed)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.aws import AWS_ENV, MotoAWS, seed_cluster, start_moto
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients

CLUSTER = "aws-test"
ENDPOINT = "https://127.0.0.1:6443"
CA = "Q0EgYnVuZGxl"


@pytest.fixture(scope="session")
def moto_aws() -> Iterator[MotoAWS]:
    """moto's server in this process (state is in-process), with test credentials in the environment."""
    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    server = start_moto()
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def seeded(moto_aws: MotoAWS) -> dict[str, Any]:
    """The ids ``seed_cluster`` created for :data:`CLUSTER`."""
    return seed_cluster(moto_aws.endpoint_url, CLUSTER)


@pytest.fixture(scope="session")
async def clients(moto_aws: MotoAWS, seeded: dict[str, Any]) -> AsyncIterator[AWSClients]:
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as opened:
        yield opened


def new_provider(clients: AWSClients) -> AWSCloudProvider:
    """A cloud provider for the seeded test cluster, with caches of its own (as one process has)."""
    return AWSCloudProvider(
        clients,
        cluster_name=CLUSTER,
        cluster_endpoint=ENDPOINT,
        cluster_ca_bundle=CA,
        region="us-east-1",
        k8s_version="1.34",
    )


@pytest.fixture(scope="session")
def cloud(clients: AWSClients) -> AWSCloudProvider:
    """One provider for the session: its catalogue caches make later tests fast."""
    return new_provider(clients)


def nodeclass_spec(name: str = "default", **spec: Any) -> dict[str, Any]:
    """An EC2NodeClass as a Karpenter user writes it, for :data:`CLUSTER`."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": f"KarpenterNodeRole-{CLUSTER}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            **spec,
        },
    }


@pytest.fixture(scope="session")
def make_nodeclass() -> Callable[..., dict[str, Any]]:
    """``make_nodeclass(name, **spec_overrides)`` → an EC2NodeClass for the test cluster (no status)."""
    return nodeclass_spec


@pytest.fixture(scope="session")
async def nodeclass(cloud: AWSCloudProvider) -> dict[str, Any]:
    """The default EC2NodeClass with its status resolved by the provider."""
    obj = nodeclass_spec()
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    obj["status"] = resolution.status
    return obj


class VersionOnly(BaseHTTPRequestHandler):
    """A stand-in apiserver answering ``/version`` only (Kubernetes 1.34): enough for ``karpy run``'s startup
    checks, which the ``karpy run`` tests here exercise without a local cluster."""

    def do_GET(self) -> None:
        body = json.dumps({"major": "1", "minor": "34"} if self.path == "/version" else {}).encode()
        self.send_response(200 if self.path == "/version" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig without CA data (plain http) for a :class:`VersionOnly` stand-in apiserver."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), VersionOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    yield path
    server.shutdown()
