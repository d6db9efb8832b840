"""Drift hashes: a stable 64-bit hash of the spec fields whose change means drift.

NodePools and their NodeClaims carry ``karpenter.sh/nodepool-hash`` (``spec.template`` without the
requirements, which drift separately), EC2NodeClasses and their NodeClaims ``karpenter.k8s.aws/ec2nodeclass-hash``
(the spec without the selector terms, which drift through the resolved status); a NodeClaim whose hash differs
from its owner's has drifted. Karpenter core ``pkg/apis/v1/nodepool.go`` (``Hash``) and
``pkg/controllers/nodepool/hash/controller.go``; AWS ``pkg/apis/v1/ec2nodeclass.go`` (``Hash``) and
``pkg/controllers/nodeclass/hash/controller.go``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def stable_hash(value: Any) -> str:
    """Decimal string of the first 8 bytes of SHA-256 over canonical JSON (sorted keys, no spaces).

    Karpenter uses hashstructure/FNV; the values differ from Karpenter's, but only karpy compares them.
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return str(int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big"))


def nodepool_hash(nodepool: Mapping[str, Any]) -> str:
    """Hash of ``spec.template`` without ``spec.template.spec.requirements`` (requirements drift separately)."""
    template = dict((nodepool.get("spec") or {}).get("template") or {})
    spec = dict(template.get("spec") or {})
    spec.pop("requirements", None)
    template["spec"] = spec
    return stable_hash(template)


def nodeclass_hash(nodeclass: Mapping[str, Any]) -> str:
    """Hash of the EC2NodeClass spec minus the selector terms that drift through resolved status instead."""
    spec = dict(nodeclass.get("spec") or {})
    for key in (
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "amiSelectorTerms",
        "capacityReservationSelectorTerms",
        "amiFamily",
    ):
        spec.pop(key, None)
    return stable_hash(spec)
