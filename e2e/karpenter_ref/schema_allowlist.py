"""The differences between karpy's CRDs and Karpenter v1.15's that are allowed, each with its reason.

tests/reference/test_crd_schema_diff.py fails on any difference (e2e/karpenter_ref/schema_diff.py) that is not
listed here, and on any entry here that no longer occurs, so the list cannot rot: remove an entry as soon as
karpy's CRD matches again. An entry names the CRD (``<plural>.<group>``), the kind of difference (``crd``,
``identity``, ``only_karpenter``, ``only_karpy``, ``type``, ``enum``, ``default``, ``cel``, ...) and the schema
path (``.spec.template.spec.requirements[].key``; ``''`` for the CRD itself), and says why karpy differs.

Today the list is empty: karpy's five CRDs (NodePool, NodeClaim, EC2NodeClass, NodeOverlay, CapacityBuffer)
match the reference on every compared path. Descriptions are karpy's own and are not compared.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AllowedDifference:
    """One allowed difference: where (``crd``, ``kind``, ``path``) and why (``reason``, never empty)."""

    crd: str
    kind: str
    path: str
    reason: str


ALLOWED: tuple[AllowedDifference, ...] = ()
