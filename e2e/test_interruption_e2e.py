"""Interruption and garbage collection end to end: karpy as its own process with ``INTERRUPTION_QUEUE`` set to
the SQS queue the local cluster created in moto (``<cluster>-interruption``).

1. A spot node (a real spot instance in moto: ``InstanceLifecycle=spot``) runs a Deployment's pods, under a
   PodDisruptionBudget that blocks every eviction; an EC2 Spot Instance Interruption Warning for it is sent to
   the queue. karpy deletes its NodeClaim and a replacement on a different offering becomes Ready while the
   drain is still blocked (capacity is requested when the message arrives, not after the drain). Once the
   PDB is removed the pods run again on the new node, the old instance is terminated, and the message is gone
   from the queue. Recorded in ``.e2e-run/phases.json``: ``interruption_message_to_replacement_ready_s`` and
   ``interruption_drain_released_to_pods_running_s``.
2. An instance carrying karpy's ownership tags but no NodeClaim (a leak) is terminated by garbage collection;
   an instance with only the cluster tag (another node manager's) and every instance that has a NodeClaim
   keep running.

Everything this module creates is removed at its end (the session's cluster is shared).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e.cluster.aws import interruption_queue_name
from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    ec2nodeclass,
    karpy_process,
    run_tagged_instance,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from e2e.test_karpy_e2e import record
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = "intr-e2e"
TAINT = "karpy-test/intr-e2e"
REPLICAS = 2


def manifests(cluster: str) -> list[dict[str, Any]]:
    """A spot-only NodePool (tainted so only this module's pods land there), its EC2NodeClass, a Deployment."""
    return [
        ec2nodeclass(POOL, cluster),
        shared_nodepool(
            POOL,
            requirements=[
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
            ],
            taints=[{"key": TAINT, "effect": "NoSchedule"}],
            # No voluntary disruption at all, so the only replacement is the interruption's own: interruption is
            # not voluntary disruption and budgets do not hold it.
            disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]},
        ),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": POOL, "namespace": "default"},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": POOL}},
                "template": {
                    "metadata": {"labels": {"app": POOL}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
                        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "app",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ],
                    },
                },
            },
        },
    ]


class Env:
    """The cluster, an admin client, karpy's process, and EC2/SQS clients on moto."""

    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any, sqs: Any, url: str) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2
        self.sqs = sqs
        self.queue_url = url

    async def claims(self) -> list[dict[str, Any]]:
        items = (await self.client.list(r.NODECLAIMS))[0]
        return [c for c in items if c["metadata"]["labels"].get(wk.LABEL_NODEPOOL) == POOL]

    async def pods(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]

    def instance(self, instance_id: str) -> dict[str, Any]:
        return dict(self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0])

    def state(self, instance_id: str) -> str:
        return str(self.instance(instance_id)["State"]["Name"])

    def in_queue(self) -> int:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """CRDs and RBAC as `kubectl apply -k manifests/` would, then karpy as its ServiceAccount with the queue."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    endpoint = local_cluster.aws_env["AWS_ENDPOINT_URL"]
    sqs = aws_client("sqs", endpoint)
    queue = interruption_queue_name(local_cluster.cluster_name)
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]  # created by the cluster's seed_cluster
    work = tmp_path_factory.mktemp("karpy-interruption")
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, work, c.aws_env, INTERRUPTION_QUEUE=queue)
    karpy.start()
    e = Env(local_cluster, client, karpy, aws_client("ec2", endpoint), sqs, url)
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    """Delete the Deployment and NodePool while karpy runs; wait until its NodeClaims and instances are gone."""
    for res, name, ns in ((r.PDBS, POOL, "default"), (r.DEPLOYMENTS, POOL, "default"), (r.NODEPOOLS, POOL, None)):
        try:
            await env.client.delete(res, name, ns)
        except ApiError as err:
            if not err.not_found:
                raise
    for claim in await env.claims():
        try:
            await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])
        except ApiError as err:
            if not err.not_found:
                raise

    def live() -> list[str]:
        pages = env.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{wk.TAG_NODEPOOL}", "Values": [POOL]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        )
        return [i["InstanceId"] for p in pages for res in p["Reservations"] for i in res["Instances"]]

    async def gone() -> bool:
        return not await env.claims() and not live()

    await wait_for(gone, timeout=120, what="interruption e2e NodeClaims and instances gone", interval=1)
    try:
        await env.client.delete(r.EC2NODECLASSES, POOL)
    except ApiError as err:
        if not err.not_found:
            raise


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _running_on(env: Env, nodes: set[str] | None = None) -> set[str]:
    """The nodes of the Deployment's pods when all REPLICAS are Running (and, given ``nodes``, only there)."""
    pods = [p for p in await env.pods() if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != REPLICAS or not all(p["status"].get("phase") == "Running" for p in pods):
        return set()
    placed = {p["spec"]["nodeName"] for p in pods}
    return placed if nodes is None or placed <= nodes else set()


def pdb() -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": POOL}}},
    }


async def _pdb_observed(env: Env) -> bool:
    obj = await env.client.get(r.PDBS, POOL, "default")
    return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]


def spot_warning(instance_id: str) -> str:
    """The exact EventBridge shape of an EC2 Spot Instance Interruption Warning, as Karpenter AWS parses it
    (``pkg/controllers/interruption/messages/spotinterruption/model.go``; the envelope is ``Metadata`` in
    ``messages/metadata.go``)."""
    return json.dumps(
        {
            "version": "0",
            "id": "e2e-spot-interruption",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


async def test_01_spot_interruption_drains_and_replaces(env: Env) -> None:
    """Spot warning → NodeClaim deleted, replacement on another offering Ready, pods Running there, message gone."""
    await apply(env.client, manifests(env.cluster.cluster_name))
    nodes = await wait_for(lambda: _running_on(env), timeout=180, what=f"{REPLICAS} pods Running")

    async def registered() -> dict[str, Any] | None:
        return next((c for c in await env.claims() if (c.get("status") or {}).get("nodeName") in nodes), None)

    victim = await wait_for(registered, timeout=30, what="the pods' NodeClaim registered")
    claims = await env.claims()
    victim_name, victim_node = victim["metadata"]["name"], victim["status"]["nodeName"]
    instance_id = victim["status"]["providerID"].rsplit("/", 1)[-1]
    labels = victim["metadata"]["labels"]
    assert labels[wk.LABEL_CAPACITY_TYPE] == "spot"
    assert env.instance(instance_id).get("InstanceLifecycle") == "spot", "a real spot instance in moto"
    offering = (labels[wk.LABEL_INSTANCE_TYPE], labels[wk.LABEL_ZONE])
    before = {c["metadata"]["name"] for c in claims}
    # A PDB that blocks every eviction: the drain cannot start, so a replacement that becomes Ready meanwhile
    # proves the capacity was requested when the message arrived, not after the drain.
    await apply(env.client, [pdb()])
    await wait_for(lambda: _pdb_observed(env), timeout=30, what="PDB status")
    on_victim = {p["metadata"]["name"] for p in await env.pods() if p["spec"].get("nodeName") == victim_node}

    sent = time.monotonic()
    env.sqs.send_message(QueueUrl=env.queue_url, MessageBody=spot_warning(instance_id))

    async def replacement_ready() -> dict[str, Any] | None:
        for claim in await env.claims():
            name = claim["metadata"]["name"]
            node_name = (claim.get("status") or {}).get("nodeName")
            if name in before or not node_name:
                continue
            try:
                node = await env.client.get(r.NODES, node_name)
            except ApiError:
                continue
            if _ready(node):
                return claim
        return None

    replacement = await wait_for(replacement_ready, timeout=180, what="replacement node Ready", interval=0.2)
    ready_after = time.monotonic() - sent
    record("interruption_message_to_replacement_ready_s", ready_after)
    victim_now = await env.client.get(r.NODECLAIMS, victim_name)
    assert victim_now["metadata"].get("deletionTimestamp"), "the interrupted NodeClaim is being deleted"
    still = {
        p["metadata"]["name"]
        for p in await env.pods()
        if p["spec"].get("nodeName") == victim_node and not p["metadata"].get("deletionTimestamp")
    }
    assert still == on_victim, "the PDB held the drain: the replacement did not wait for it"
    await env.client.delete(r.PDBS, POOL, "default")
    released = time.monotonic()

    async def running_elsewhere() -> set[str]:
        # Any node but the victim: voluntary disruption may legitimately move them on from the replacement.
        placed = await _running_on(env)
        return placed if victim_node not in placed else set()

    running = await wait_for(running_elsewhere, timeout=120, what="pods Running again off the interrupted node")
    record("interruption_drain_released_to_pods_running_s", time.monotonic() - released)
    print(
        f"\nspot interruption: replacement Ready {ready_after:.1f}s after the message (drain still blocked); "
        f"pods Running on {sorted(running)} {time.monotonic() - released:.1f}s after the PDB was removed"
    )
    assert victim_node not in running

    async def victim_gone() -> bool:
        return victim_name not in {c["metadata"]["name"] for c in await env.claims()}

    await wait_for(victim_gone, timeout=120, what="interrupted NodeClaim terminated")
    assert env.state(instance_id) in ("shutting-down", "terminated")
    new_labels = replacement["metadata"]["labels"]
    assert new_labels[wk.LABEL_CAPACITY_TYPE] == "spot"
    assert (new_labels[wk.LABEL_INSTANCE_TYPE], new_labels[wk.LABEL_ZONE]) != offering, (
        "the interrupted offering is unavailable for 3 minutes"
    )
    assert env.in_queue() == 0, "the handled message is deleted"
    lines = env.karpy.logs()
    assert any(
        line.get("message") == "deleting nodeclaim on interruption" and line.get("nodeclaim") == victim_name
        for line in lines
    )
    events = (
        await env.client.list(r.EVENTS, "default", query={"fieldSelector": f"involvedObject.name={victim_name}"})
    )[0]
    assert {"SpotInterrupted", "TerminatingOnInterruption"} <= {e["reason"] for e in events}
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])


async def test_02_gc_terminates_leak_only(env: Env) -> None:
    """A karpy-tagged instance without a NodeClaim is terminated; a cluster-tag-only instance and every
    instance behind a NodeClaim are not."""
    cluster = env.cluster.cluster_name
    # The Deployment on karpy's nodes, whether or not the spot scenario ran first (apply is idempotent).
    await apply(env.client, manifests(cluster))
    await wait_for(lambda: _running_on(env), timeout=180, what=f"{REPLICAS} pods Running")
    claimed = await _standing_instances(env)
    assert claimed, "the Deployment's node is still there"

    def run(tags: dict[str, str]) -> str:
        return run_tagged_instance(env.ec2, cluster, tags)

    cluster_tag = {wk.cluster_tag(cluster): "owned"}
    leak = run({**cluster_tag, wk.TAG_NODEPOOL: POOL, wk.TAG_NODECLAIM: "intr-e2e-never-existed"})
    other = run(cluster_tag)
    started = time.monotonic()
    try:
        await wait_for(
            lambda: _async(env.state(leak) in ("shutting-down", "terminated")),
            timeout=90,
            what="leaked instance terminated by garbage collection",
            interval=1,
        )
        record("gc_leak_terminated_after_s", time.monotonic() - started)
        assert time.monotonic() - started >= 25, "not before the 30 s grace"
        assert env.state(other) == "running", "another node manager's instance is never touched"
        # Instances whose NodeClaim still stands are running (the budget holds voluntary disruption, but an
        # interruption scenario run before may have replaced NodeClaims: the log check below covers those).
        standing = await _standing_instances(env)
        assert standing, "the Deployment's node is still there"
        assert all(env.state(i) == "running" for i in standing), "instances with a NodeClaim are never touched"
        assert any(
            line.get("message") == "terminated leaked instance" and line.get("instance_id") == leak
            for line in env.karpy.logs()
        )
        assert not any(
            line.get("message") == "terminated leaked instance"
            and line.get("instance_id") in claimed | standing | {other}
            for line in env.karpy.logs()
        )
    finally:
        env.ec2.terminate_instances(InstanceIds=[leak, other])
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])


async def _standing_instances(env: Env) -> set[str]:
    """Instance ids of NodeClaims that exist and are not being deleted."""
    return {
        c["status"]["providerID"].rsplit("/", 1)[-1]
        for c in (await env.client.list(r.NODECLAIMS))[0]
        if (c.get("status") or {}).get("providerID") and not c["metadata"].get("deletionTimestamp")
    }


async def _async(value: bool) -> bool:
    return value
