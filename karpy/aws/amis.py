"""AMIs selected by an EC2NodeClass, and which instance types each can boot (Karpenter AWS
``pkg/providers/amifamily/{ami.go,al2023.go}``).

Selector terms are ORed. An ``alias`` term (``al2023@latest``, ``al2023@vYYYYMMDD``) is read from the public EKS
SSM parameters ``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<x86_64|arm64>/<standard|nvidia|neuron>/
…/image_id`` and each image carries its variant's requirements (architecture; GPU or accelerator presence); an
``id``/``name``/``tags``/``owner`` term is a DescribeImages query and its images carry their architecture only.
For each requirement set the newest image wins. :class:`AMIProvider` caches the result per (selector terms,
Kubernetes version) for ``AMI_REFRESH_INTERVAL`` (:data:`karpy.aws.cache.AMIS`). Deliberately not done: AMI
deprecation checks and families other than AL2023.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from karpy.apis import labels as wk
from karpy.apis.hashing import stable_hash
from karpy.apis.meta import JSON
from karpy.aws.cache import AMIS, Timer, ttl_cache
from karpy.aws.errors import is_not_found
from karpy.aws.requirements import format_requirement, requirement_allows
from karpy.aws.selectors import tag_filters

EKS_AMI_ROOT: Final = "/aws/service/eks/optimized-ami"
_ARCH: Final = {"x86_64": "amd64", "arm64": "arm64"}


def alias_parameters(alias: str, k8s_version: str) -> dict[str, tuple[str, str]]:
    """SSM parameter name → (architecture, variant) for an ``al2023@<version>`` alias.

    Raises:
        ValueError: the alias family is not al2023 (the only family karpy bootstraps).
    """
    family, _, version = alias.partition("@")
    if family.lower() != "al2023":
        raise ValueError(f"unsupported AMI alias family {family!r} (only al2023)")
    version = version or "latest"
    out = {}
    for arch in ("x86_64", "arm64"):
        variants = ("standard", "nvidia", "neuron") if arch == "x86_64" else ("standard", "nvidia")
        for variant in variants:
            base = f"{EKS_AMI_ROOT}/{k8s_version}/amazon-linux-2023/{arch}/{variant}"
            if version == "latest":
                name = f"{base}/recommended/image_id"
            else:
                name = f"{base}/amazon-eks-node-al2023-{arch}-{variant}-{k8s_version}-{version}/image_id"
            out[name] = (arch, variant)
    return out


def ami_requirements(arch: str, variant: str) -> list[JSON]:
    """Karpenter's AL2023 AMI requirements: the architecture, and GPU/accelerator presence per variant."""
    reqs: list[JSON] = [{"key": wk.LABEL_ARCH, "operator": "In", "values": [_ARCH.get(arch, arch)]}]
    if variant == "nvidia":
        reqs.append({"key": wk.LABEL_INSTANCE_GPU_MANUFACTURER, "operator": "In", "values": ["nvidia"]})
    elif variant == "neuron":
        reqs.append({"key": wk.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER, "operator": "In", "values": ["aws"]})
    else:
        reqs.append({"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"})
        reqs.append({"key": wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"})
    return reqs


def _created(image: Mapping[str, Any]) -> datetime:
    """CreationDate as an aware datetime (the oldest possible when missing or malformed)."""
    try:
        created = datetime.fromisoformat(str(image.get("CreationDate", "")).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return created if created.tzinfo else created.replace(tzinfo=UTC)


async def _describe_images(ec2: Any, **kwargs: Any) -> list[JSON]:
    try:
        response = await ec2.describe_images(**kwargs)
    except Exception as err:
        if is_not_found(err):
            return []
        raise
    return [i for i in response.get("Images") or [] if i.get("State", "available") == "available"]


async def resolve_amis(ec2: Any, ssm: Any, terms: Sequence[Mapping[str, Any]], k8s_version: str) -> list[JSON]:
    """``status.amis`` entries ``{id, name, requirements}``: per requirement set, the newest image wins.

    Raises:
        ValueError: an alias of an unsupported family.
        botocore ClientError (or a connection error): SSM or DescribeImages failed.
    """
    candidates: list[tuple[JSON, list[JSON]]] = []
    for term in terms:
        if term.get("alias"):
            params = alias_parameters(str(term["alias"]), k8s_version)
            response = await ssm.get_parameters(Names=list(params))
            ids = {p["Value"]: params[p["Name"]] for p in response.get("Parameters") or []}
            if not ids:
                continue
            for image in await _describe_images(ec2, ImageIds=list(ids)):
                candidates.append((image, ami_requirements(*ids[image["ImageId"]])))
            continue
        kwargs: JSON = {}
        filters: list[JSON] = []
        if term.get("id"):
            kwargs["ImageIds"] = [term["id"]]
        if term.get("name"):
            filters.append({"Name": "name", "Values": [term["name"]]})
        filters += tag_filters(term.get("tags") or {})
        if term.get("owner"):
            kwargs["Owners"] = [term["owner"]]
        elif term.get("name") and not term.get("id"):
            kwargs["Owners"] = ["self", "amazon"]
        if filters:
            kwargs["Filters"] = filters
        for image in await _describe_images(ec2, **kwargs):
            arch = str(image.get("Architecture") or "x86_64")
            candidates.append((image, [{"key": wk.LABEL_ARCH, "operator": "In", "values": [_ARCH.get(arch, arch)]}]))
    newest: dict[str, tuple[JSON, list[JSON]]] = {}
    for image, reqs in candidates:
        key = stable_hash(reqs)
        if key not in newest or _created(image) > _created(newest[key][0]):
            newest[key] = (image, reqs)
    return sorted(
        ({"id": i["ImageId"], "name": i.get("Name", ""), "requirements": r} for i, r in newest.values()),
        key=lambda a: (str(a["name"]), str(a["id"])),
    )


class AMIProvider:
    """:func:`resolve_amis` cached per (selector terms, Kubernetes version) for ``ttl`` seconds.

    ``ttl`` is ``AMI_REFRESH_INTERVAL`` (default :data:`karpy.aws.cache.AMIS`, 60 s); a failed read is not
    cached (the exception propagates and the next call reads again). Callers get their own copy of the list.
    """

    def __init__(
        self, ec2: Any, ssm: Any, k8s_version: str, *, ttl: float = AMIS.seconds, clock: Timer = time.monotonic
    ) -> None:
        self.ec2 = ec2
        self.ssm = ssm
        self.k8s_version = k8s_version
        self._cache = ttl_cache(ttl, clock)

    async def resolve(self, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
        """``status.amis`` for ``terms`` (see :func:`resolve_amis`; same errors)."""
        key = (json.dumps(list(terms), sort_keys=True, default=str), self.k8s_version)
        cached: list[JSON] | None = self._cache.get(key)
        if cached is None:
            cached = await resolve_amis(self.ec2, self.ssm, terms, self.k8s_version)
            self._cache[key] = cached
        return copy.deepcopy(cached)


def ami_for(amis: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> Mapping[str, Any] | None:
    """The first resolved AMI (``status.amis`` entry) whose requirements an instance type with ``labels``
    satisfies, None when there is none (Karpenter's AMI → instance type mapping, ``MapToInstanceTypes``)."""
    for ami in amis:
        reqs = ami.get("requirements") or []
        if all(requirement_allows(r, labels.get(str(r.get("key")))) for r in reqs):
            return ami
    return None


def ami_requirements_text(amis: Sequence[Mapping[str, Any]]) -> str:
    """The distinct requirement sets of ``amis`` as ``(a, b) or (c)``, in status order ("" when none)."""
    sets: list[str] = []
    for ami in amis:
        text = ", ".join(format_requirement(r) for r in ami.get("requirements") or []) or "any instance type"
        if f"({text})" not in sets:
            sets.append(f"({text})")
    return " or ".join(sets)


def no_ami_reason(nodeclass: Mapping[str, Any]) -> str:
    """Why a type has no AMI: ``EC2NodeClass "<name>" resolves AMIs only for (<requirements>) or (…)``."""
    name = (nodeclass.get("metadata") or {}).get("name", "")
    amis = (nodeclass.get("status") or {}).get("amis") or []
    return f'EC2NodeClass "{name}" resolves AMIs only for {ami_requirements_text(amis) or "no instance type"}'
