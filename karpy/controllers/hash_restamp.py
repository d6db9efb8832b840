"""Re-stamping NodeClaims when their NodePool's / EC2NodeClass's drift hash changes algorithm, not value.

Karpenter core ``pkg/controllers/nodepool/hash/controller.go`` and AWS
``pkg/controllers/nodeclass/hash/controller.go``: when the owner's hash-version annotation differs from the
current version, every NodeClaim of that owner with another version gets the current version and, unless it
already has a ``Drifted`` condition, the owner's current hash: a new hash algorithm never drifts a node.

karpy adds one case Karpenter does not have: karpy wrote the same version strings (``v3``, ``v6``) with its
own SHA-256 hash before it computed Karpenter's. An owner whose stored hash is that legacy hash of its
current spec was stamped by such a karpy; its NodeClaims carrying the same legacy value were stamped from
that spec, so they get the current hash too (the others keep theirs and drift, as they did before). Until the
owner is re-stamped, drift compares the NodeClaim's hash with the owner's annotation (Karpenter's rule,
:func:`karpy.controllers.disruption.drift.hash_drifted`), so those NodeClaims do not drift in between either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODECLAIMS
from karpy.state.cluster import ClusterState


@dataclass(frozen=True)
class HashStamp:
    """One owner's hash as it should be: annotation keys, the current ``version``, the current hash ``want``
    and the ``legacy`` hash karpy wrote for the same spec before it computed Karpenter's."""

    hash_key: str
    version_key: str
    version: str
    want: str
    legacy: str


def nodepool_stamp(want: str, legacy: str) -> HashStamp:
    """The ``karpenter.sh/nodepool-hash`` stamp."""
    return HashStamp(
        wk.ANNOTATION_NODEPOOL_HASH, wk.ANNOTATION_NODEPOOL_HASH_VERSION, wk.NODEPOOL_HASH_VERSION, want, legacy
    )


def nodeclass_stamp(want: str, legacy: str) -> HashStamp:
    """The ``karpenter.k8s.aws/ec2nodeclass-hash`` stamp."""
    return HashStamp(
        wk.ANNOTATION_NODECLASS_HASH, wk.ANNOTATION_NODECLASS_HASH_VERSION, wk.NODECLASS_HASH_VERSION, want, legacy
    )


def nodeclaim_restamp(claim: NodeClaim, owner_annotations: Mapping[str, str], stamp: HashStamp) -> dict[str, str]:
    """The annotations to merge into ``claim`` before its owner is stamped with ``stamp`` ({}: none).

    Owner at another hash version (Karpenter's rule): a claim at another version gets the current version,
    and the current hash unless it has a ``Drifted`` condition. Owner carrying karpy's legacy hash of its
    current spec: a claim carrying that same legacy hash gets the current hash and version.
    """
    notes = claim.meta.annotations
    if owner_annotations.get(stamp.version_key) != stamp.version:
        if notes.get(stamp.version_key) == stamp.version:
            return {}
        patch = {stamp.version_key: stamp.version}
        if not any(c.type == wk.COND_DRIFTED for c in claim.conditions):
            patch[stamp.hash_key] = stamp.want
        return patch
    legacy_owner = owner_annotations.get(stamp.hash_key) == stamp.legacy != stamp.want
    if legacy_owner and notes.get(stamp.hash_key) == stamp.legacy:
        return {stamp.hash_key: stamp.want, stamp.version_key: stamp.version}
    return {}


async def restamp_nodeclaims(
    client: KubeClient,
    state: ClusterState,
    claims: Iterable[NodeClaim],
    owner_annotations: Mapping[str, str],
    stamp: HashStamp,
) -> list[str]:
    """Patch every claim :func:`nodeclaim_restamp` says to (a NodeClaim gone meanwhile is skipped, as
    Karpenter ignores NotFound); returns the names patched.

    Raises:
        ApiError: the apiserver refused a patch (other than NotFound); the caller's reconcile is retried.
    """
    patched: list[str] = []
    for claim in claims:
        patch = nodeclaim_restamp(claim, owner_annotations, stamp)
        if not patch:
            continue
        try:
            updated = await client.merge_patch(NODECLAIMS, claim.name, {"metadata": {"annotations": patch}})
        except ApiError as err:
            if err.not_found:
                continue
            raise
        state.apply("NodeClaim", "MODIFIED", updated)
        patched.append(claim.name)
    return patched


__all__ = ["HashStamp", "nodeclaim_restamp", "nodeclass_stamp", "nodepool_stamp", "restamp_nodeclaims"]
