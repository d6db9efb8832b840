"""Changing the hash algorithm never drifts a node: NodeClaims are re-stamped, as Karpenter's hash controllers
do when the hash-version annotation changes (core ``pkg/controllers/nodepool/hash/controller.go``, AWS
``pkg/controllers/nodeclass/hash/controller.go``), and NodeClaims stamped by a karpy that wrote its own
SHA-256 hashes under the same versions (v3/v6) are re-stamped too; truly drifted ones stay drifted."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s_client

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.hashing import legacy_nodeclass_hash, legacy_nodepool_hash, nodeclass_hash, nodepool_hash
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.controls import DisruptionSettings
from karpy.controllers.disruption.drift import NODECLASS_DRIFTED, NODEPOOL_DRIFTED, static_drift
from karpy.controllers.disruption.methods import Methods
from karpy.controllers.hash_restamp import nodeclaim_restamp, nodepool_stamp
from karpy.controllers.nodeclass_status import NodeClassStatusReconciler
from karpy.controllers.nodepool_status import NodePoolStatusReconciler
from karpy.kube.client import KubeClient
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODEPOOLS
from karpy.operator import hash_ca_bundle
from karpy.settings import Settings
from karpy.state.cluster import ClusterState
from tests.unit.disruption_builders import hash_stamped, nodeclaim, nodeclass, nodepool

CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
DRIFTED = {"type": wk.COND_DRIFTED, "status": "True", "reason": "NodePoolDrifted", "lastTransitionTime": "x"}


def stamped(obj: dict[str, Any], hash_key: str, value: str, version_key: str, version: str) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {}).update({hash_key: value, version_key: version})
    return obj


def cluster(*objects: dict[str, Any]) -> tuple[ClusterState, FakeKube]:
    state = ClusterState()
    for obj in objects:
        state.apply(obj["kind"], "ADDED", obj)
    return state, FakeKube(list(objects))


def notes(kube: FakeKube, name: str) -> dict[str, str]:
    obj = kube.object(NODECLAIMS, name)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def np_notes(pool: dict[str, Any], value: str, version: str) -> dict[str, Any]:
    return stamped(pool, wk.ANNOTATION_NODEPOOL_HASH, value, wk.ANNOTATION_NODEPOOL_HASH_VERSION, version)


def claim_np(claim: dict[str, Any], value: str, version: str) -> dict[str, Any]:
    return np_notes(claim, value, version)


async def test_nodepool_hash_version_change_restamps_nodeclaims_instead_of_drifting() -> None:
    """NodePool at another hash version: its NodeClaims at another version get v3 and the new hash, except a
    NodeClaim already Drifted, which gets only the version (Karpenter's rule); the NodePool is stamped last."""
    pool = np_notes(nodepool(), "1", "v2")
    fresh = claim_np(nodeclaim("fresh", pool), "1", "v2")
    drifted = claim_np(nodeclaim("drifted", pool), "0", "v2")
    drifted["status"]["conditions"].append(DRIFTED)
    current = claim_np(nodeclaim("current", pool), "other", wk.NODEPOOL_HASH_VERSION)
    state, kube = cluster(nodeclass(), pool, fresh, drifted, current)
    await NodePoolStatusReconciler(kube, state, EventRecorder(kube)).reconcile("np")

    want = nodepool_hash(pool)
    assert notes(kube, "fresh")[wk.ANNOTATION_NODEPOOL_HASH] == want
    assert notes(kube, "fresh")[wk.ANNOTATION_NODEPOOL_HASH_VERSION] == wk.NODEPOOL_HASH_VERSION
    assert notes(kube, "drifted")[wk.ANNOTATION_NODEPOOL_HASH] == "0"
    assert notes(kube, "drifted")[wk.ANNOTATION_NODEPOOL_HASH_VERSION] == wk.NODEPOOL_HASH_VERSION
    assert notes(kube, "current")[wk.ANNOTATION_NODEPOOL_HASH] == "other"
    patched = [r.path for r in kube.requests_to("PATCH")]
    assert patched.index(NODEPOOLS.path(None, "np")) > patched.index(NODECLAIMS.path(None, "fresh"))
    stored = kube.object(NODEPOOLS, "np")
    assert stored is not None and stored["metadata"]["annotations"][wk.ANNOTATION_NODEPOOL_HASH] == want
    view = NodePool.from_json(stored)
    assert static_drift(NodeClaim.from_json(state.nodeclaims["fresh"]), view, None) == ""


async def test_karpys_legacy_nodepool_hash_is_restamped_not_drifted() -> None:
    """A NodePool and NodeClaims stamped by karpy's SHA-256 hash under v3: the NodeClaims stamped from the
    current spec are not drifted and get Karpenter's hash; one stamped from an older spec keeps drifting."""
    pool = nodepool()
    legacy = legacy_nodepool_hash(pool)
    np_notes(pool, legacy, wk.NODEPOOL_HASH_VERSION)
    same = claim_np(nodeclaim("same", pool), legacy, wk.NODEPOOL_HASH_VERSION)
    older = claim_np(nodeclaim("older", pool), legacy_nodepool_hash(nodepool(taints=[])), wk.NODEPOOL_HASH_VERSION)
    state, kube = cluster(nodeclass(), pool, same, older)
    view = NodePool.from_json(pool)
    assert static_drift(NodeClaim.from_json(same), view, None) == ""  # before the re-stamp, too
    assert static_drift(NodeClaim.from_json(older), view, None) == NODEPOOL_DRIFTED

    await NodePoolStatusReconciler(kube, state, EventRecorder(kube)).reconcile("np")
    assert notes(kube, "same")[wk.ANNOTATION_NODEPOOL_HASH] == nodepool_hash(pool)
    assert (
        notes(kube, "older")[wk.ANNOTATION_NODEPOOL_HASH]
        == older["metadata"]["annotations"][wk.ANNOTATION_NODEPOOL_HASH]
    )
    assert static_drift(NodeClaim.from_json(state.nodeclaims["older"]), view, None) == NODEPOOL_DRIFTED


async def test_nodeclass_restamp_uses_the_ca_bundle() -> None:
    """EC2NodeClass at another hash version: its NodeClaims get the hash computed with the CA bundle; a legacy
    karpy hash of the current spec is re-stamped the same way."""
    nclass = nodeclass()
    nclass["metadata"]["annotations"] = {
        wk.ANNOTATION_NODECLASS_HASH: legacy_nodeclass_hash(nclass),
        wk.ANNOTATION_NODECLASS_HASH_VERSION: wk.NODECLASS_HASH_VERSION,
    }
    pool = nodepool()
    claim = nodeclaim(
        "c",
        pool,
        annotations={
            wk.ANNOTATION_NODECLASS_HASH: legacy_nodeclass_hash(nclass),
            wk.ANNOTATION_NODECLASS_HASH_VERSION: wk.NODECLASS_HASH_VERSION,
        },
    )
    state, kube = cluster(nclass, pool, claim)
    rec = NodeClassStatusReconciler(kube, state, None, EventRecorder(kube), ca_bundle=CA)  # type: ignore[arg-type]
    view = EC2NodeClass.from_json(nclass)
    await rec._ensure_hash(view)
    want = nodeclass_hash(nclass, CA)
    assert want != nodeclass_hash(nclass)
    assert notes(kube, "c")[wk.ANNOTATION_NODECLASS_HASH] == want
    restamped = NodeClaim.from_json(state.nodeclaims["c"])
    stamped_class = EC2NodeClass.from_json(state.nodeclasses["nc"])
    assert stamped_class.meta.annotations[wk.ANNOTATION_NODECLASS_HASH] == want
    assert static_drift(restamped, NodePool.from_json(pool), stamped_class) == ""
    # Drift compares the EC2NodeClass's annotation (Karpenter's rule): one stamped without the CA bundle differs.
    without_ca = hash_stamped(state.nodeclasses["nc"])
    assert static_drift(restamped, NodePool.from_json(pool), EC2NodeClass.from_json(without_ca)) == NODECLASS_DRIFTED


async def test_hash_ca_bundle_prefers_the_setting_then_the_kubeconfig_ca(tmp_path: Path) -> None:
    """Karpenter's GetCABundle: CLUSTER_CA_BUNDLE, else the base64 of the REST config's CA data."""
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.crt").write_bytes(pem)
    api = k8s_client.ApiClient(configuration=k8s_client.Configuration())
    api.configuration.ssl_ca_cert = str(tmp_path / "ca.crt")  # as the kubeconfig loader leaves it
    client = KubeClient(api)
    no_ca = KubeClient(k8s_client.ApiClient(configuration=k8s_client.Configuration()))
    try:
        assert hash_ca_bundle(Settings(cluster_name="karpy", cluster_ca_bundle=CA), client) == CA
        assert hash_ca_bundle(Settings(cluster_name="karpy"), client) == base64.b64encode(pem).decode()
        assert no_ca.ca_bundle() == ""
    finally:
        await client.close()
        await no_ca.close()


@pytest.mark.parametrize("version", ["v2", ""])
def test_restamp_rule_for_nodeclaims_without_the_current_version(version: str) -> None:
    """The pure rule: only NodeClaims at another version are touched when the owner's version differs."""
    stamp = nodepool_stamp("new", "legacy")
    owner = {wk.ANNOTATION_NODEPOOL_HASH: "old", wk.ANNOTATION_NODEPOOL_HASH_VERSION: version}
    pool = nodepool()
    at_old = NodeClaim.from_json(claim_np(nodeclaim("a", pool), "old", version))
    at_current = NodeClaim.from_json(claim_np(nodeclaim("b", pool), "x", wk.NODEPOOL_HASH_VERSION))
    assert nodeclaim_restamp(at_old, owner, stamp) == {
        wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
        wk.ANNOTATION_NODEPOOL_HASH: "new",
    }
    assert nodeclaim_restamp(at_current, owner, stamp) == {}


def test_a_drift_halt_recorded_with_legacy_hashes_still_holds() -> None:
    """A ``karpy.sh/drift-halted`` record written with karpy's earlier hashes holds while the specs are
    unchanged (the new hash algorithm alone must not lift it), and lifts when the NodePool changes."""
    nclass = nodeclass()
    pool = nodepool()
    record = controls.halt_record("bad AMI", legacy_nodepool_hash(pool), legacy_nodeclass_hash(nclass), "t")
    pool["metadata"]["annotations"][controls.ANNOTATION_DRIFT_HALTED] = record
    state, _ = cluster(nclass, pool)
    methods = Methods(state, None, DisruptionSettings())  # type: ignore[arg-type]  # drift_halt reads no queue
    assert methods.drift_halt(NodePool.from_json(pool)) == "bad AMI"
    changed = nodepool(taints=[{"key": "k", "effect": "NoSchedule"}])
    changed["metadata"]["annotations"][controls.ANNOTATION_DRIFT_HALTED] = record
    assert methods.drift_halt(NodePool.from_json(changed)) == ""


async def test_a_cluster_karpenter_stamped_is_adopted_without_restamp_or_drift() -> None:
    """NodePool, EC2NodeClass and NodeClaim carrying the hashes and versions Karpenter v1.15 writes (values
    pinned against the reference in tests/reference/test_karpenter_hashes.py): karpy's hash stamping patches
    nothing and no NodeClaim drifts; a hash-version change on the owner re-stamps the NodeClaim, never drifts it."""
    nclass, pool = hash_stamped(nodeclass(), CA), hash_stamped(nodepool())
    claim = nodeclaim("k", pool, annotations={wk.ANNOTATION_NODECLASS_HASH: nodeclass_hash(nclass, CA)})
    state, kube = cluster(nclass, pool, claim)
    await NodePoolStatusReconciler(kube, state, EventRecorder(kube))._ensure_hash(NodePool.from_json(pool))
    rec = NodeClassStatusReconciler(kube, state, None, EventRecorder(kube), ca_bundle=CA)  # type: ignore[arg-type]
    await rec._ensure_hash(EC2NodeClass.from_json(nclass))
    assert kube.requests_to("PATCH") == []
    views = NodeClaim.from_json(claim), NodePool.from_json(pool), EC2NodeClass.from_json(nclass)
    assert static_drift(*views) == ""

    older = np_notes(hash_stamped(nodepool(expireAfter="24h")), "1", "v2")  # as an older Karpenter left it
    older_claim = claim_np(nodeclaim("o", older), "1", "v2")
    state, kube = cluster(nclass, older, older_claim)
    assert static_drift(NodeClaim.from_json(older_claim), NodePool.from_json(older), None) == ""
    await NodePoolStatusReconciler(kube, state, EventRecorder(kube))._ensure_hash(NodePool.from_json(older))
    assert notes(kube, "o")[wk.ANNOTATION_NODEPOOL_HASH] == nodepool_hash(older)
    stored = kube.object(NODEPOOLS, "np")
    assert stored is not None
    assert static_drift(NodeClaim.from_json(state.nodeclaims["o"]), NodePool.from_json(stored), None) == ""
