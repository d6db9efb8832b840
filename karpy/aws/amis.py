"""AMIs selected by an EC2NodeClass, and which instance types each can boot (Karpenter AWS
``pkg/providers/amifamily/{ami.go,types.go,al2023.go,al2.go,bottlerocket.go,windows.go,custom.go}`` and
``pkg/controllers/nodeclass/ami.go``).

Selector terms are ORed. An ``alias`` term (``<family>@<version>``, the only term when present) is read from the
public SSM parameters Karpenter reads for its family, and each image carries its variant's requirements:

* ``al2023@``: ``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<x86_64|arm64>/<variant>/recommended/
  image_id`` (pinned: ``…/<variant>/amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>/image_id``), variants
  standard, nvidia and (x86_64 only) neuron;
* ``al2@``: ``…/<k8s>/amazon-linux-2[-arm64|-gpu]/recommended/image_id`` (pinned: ``amazon-eks[-arm64|-gpu]-node-
  <k8s>-<version>``); the GPU image boots both nvidia and neuron types. Refused on Kubernetes 1.33 and later
  (:class:`UnsupportedAliasError`, Karpenter's ``AL2DeprecationError``);
* ``bottlerocket@``: ``/aws/service/bottlerocket/aws-k8s-<k8s>[-nvidia]/<arch>/<version without "v">/image_id``;
  the x86_64 standard image boots standard and neuron types;
* ``windows2019@``/``windows2022@``/``windows2025@``: ``/aws/service/ami-windows-latest/Windows_Server-<year>-
  English-Core-EKS_Optimized-<k8s>/image_id`` (always the latest), requirements ``kubernetes.io/os In [windows]``
  and ``node.kubernetes.io/windows-build In [<build>]``. Windows 2025 needs Kubernetes 1.35 or later.

Variant requirements: standard = no GPU and no accelerator (``DoesNotExist``); nvidia = ``instance-gpu-count
Exists``; neuron = ``instance-accelerator-count Exists``. Every image also gets ``kubernetes.io/arch In
[<its architecture>]``; images of another architecture (i386, mac) are skipped.

Other terms: every ``id`` (and every ``ssmParameter``'s ``ami-…`` value) joins one ``image-id`` query; a
``name``/``tags``/``owner`` term is a query of its own, owners defaulting to ``self`` and ``amazon`` when a name
is given (so a name never matches a stranger's public image) and to any owner otherwise. Those images carry
their architecture only. Only ``available`` images are read, deprecated ones included.

For each requirement set one image wins: a non-deprecated one over a deprecated one, then the newest
``CreationDate``, then the greater name. ``status.amis`` lists the winners newest first (ties: by id), each
``{id, name, requirements[, deprecated: true]}`` with requirements ordered by key length then key, as
Karpenter's AMI reconciler writes them. :class:`AMIProvider` caches the result per (selector terms, Kubernetes
version) for ``AMI_REFRESH_INTERVAL`` (:data:`karpy.aws.cache.AMIS`).

Differs from Karpenter: an alias none of whose SSM parameters exist resolves to no AMIs (``AMINotFound``), where
Karpenter returns a reconcile error and leaves the condition as it was.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.hashing import stable_hash
from karpy.apis.meta import JSON
from karpy.aws.amifamily import resolver, windows
from karpy.aws.cache import AMIS, Timer, ttl_cache
from karpy.aws.errors import is_not_found
from karpy.aws.requirements import format_requirement, requirement_allows
from karpy.aws.selectors import tag_filters

EKS_AMI_ROOT: Final = "/aws/service/eks/optimized-ami"
BOTTLEROCKET_ROOT: Final = "/aws/service/bottlerocket"
WINDOWS_ROOT: Final = "/aws/service/ami-windows-latest"
LATEST: Final = "latest"
# EC2 architecture → kubernetes.io/arch (Karpenter's AWSToKubeArchitectures); other architectures are skipped.
ARCHITECTURES: Final = {"x86_64": "amd64", "arm64": "arm64"}
# Alias family (lower case, as written in the alias) → amiFamily.
ALIAS_FAMILIES: Final = resolver.ALIAS_FAMILIES
# amiFamily → node.kubernetes.io/windows-build (Karpenter AWS ``pkg/apis/v1/labels.go``).
WINDOWS_BUILDS: Final = windows.BUILDS
VARIANTS: Final = ("standard", "nvidia", "neuron")


class UnsupportedAliasError(ValueError):
    """An alias Karpenter refuses for the cluster's Kubernetes version (AL2 on 1.33+, Windows 2025 before 1.35):
    ``AMIsReady=False`` with reason ``UnsupportedAlias``."""

    reason = "UnsupportedAlias"


def parse_alias(alias: str) -> tuple[str, str]:
    """``al2023@latest`` → ``("AL2023", "latest")``.

    Raises:
        ValueError: not ``family@version``, or an unknown family (the CRD's validation refuses both).
    """
    family, sep, version = alias.partition("@")
    if not sep or not version or "@" in version:
        raise ValueError(f"failed to parse AMI alias {alias!r}, invalid format")
    if family not in ALIAS_FAMILIES:
        raise ValueError(f"{family!r} is an invalid alias family")
    return ALIAS_FAMILIES[family], version


def _requirement(key: str, operator: str, *values: str) -> JSON:
    return (
        {"key": key, "operator": operator, "values": sorted(values)} if values else {"key": key, "operator": operator}
    )


def variant_requirements(variant: str) -> list[JSON]:
    """Karpenter's ``Variant.Requirements()``: standard = no GPU and no accelerator; nvidia = a GPU count;
    neuron = an accelerator count.

    Raises:
        ValueError: not one of :data:`VARIANTS`.
    """
    if variant == "standard":
        return [
            _requirement(wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "DoesNotExist"),
            _requirement(wk.LABEL_INSTANCE_GPU_COUNT, "DoesNotExist"),
        ]
    if variant == "nvidia":
        return [_requirement(wk.LABEL_INSTANCE_GPU_COUNT, "Exists")]
    if variant == "neuron":
        return [_requirement(wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "Exists")]
    raise ValueError(f"variant {variant!r} is not well-known")


def _minor(k8s_version: str) -> int | None:
    try:
        return int(k8s_version.split(".")[1])
    except (IndexError, ValueError):
        return None


def _pick(version: str, latest: str, pinned: str) -> str:
    return latest if version == LATEST else pinned


def _al2023(k8s: str, version: str) -> dict[str, list[str]]:
    out = {}
    for arch, variants in (("x86_64", VARIANTS), ("arm64", ("standard", "nvidia"))):
        for variant in variants:
            name = _pick(version, "recommended", f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{version}")
            out[f"{EKS_AMI_ROOT}/{k8s}/amazon-linux-2023/{arch}/{variant}/{name}/image_id"] = [variant]
    return out


def _al2(k8s: str, version: str) -> dict[str, list[str]]:
    if (_minor(k8s) or 0) >= 33:
        raise UnsupportedAliasError(
            "AL2 aliases are no longer supported on EKS 1.33+ (see https://docs.aws.amazon.com/eks/latest/userguide/"
            "kubernetes-versions-standard.html#kubernetes-1-33)"
        )
    return {
        f"{EKS_AMI_ROOT}/{k8s}/amazon-linux-2/{_pick(version, 'recommended', f'amazon-eks-node-{k8s}-{version}')}"
        "/image_id": ["standard"],
        f"{EKS_AMI_ROOT}/{k8s}/amazon-linux-2-arm64/"
        f"{_pick(version, 'recommended', f'amazon-eks-arm64-node-{k8s}-{version}')}/image_id": ["standard"],
        f"{EKS_AMI_ROOT}/{k8s}/amazon-linux-2-gpu/"
        f"{_pick(version, 'recommended', f'amazon-eks-gpu-node-{k8s}-{version}')}/image_id": ["neuron", "nvidia"],
    }


def _bottlerocket(k8s: str, version: str) -> dict[str, list[str]]:
    # Bottlerocket versions carry a "v" on GitHub but not in the SSM path: both are accepted.
    trimmed = version.lstrip("v")
    root = f"{BOTTLEROCKET_ROOT}/aws-k8s-{k8s}"
    return {
        f"{root}/x86_64/{trimmed}/image_id": ["standard", "neuron"],
        f"{root}/arm64/{trimmed}/image_id": ["standard"],
        f"{root}-nvidia/x86_64/{trimmed}/image_id": ["nvidia"],
        f"{root}-nvidia/arm64/{trimmed}/image_id": ["nvidia"],
    }


def windows_parameter(family: str, k8s_version: str) -> str:
    """The SSM parameter of the latest EKS-optimized Windows Server Core AMI of ``family`` (``Windows2022``)."""
    year = family.removeprefix("Windows")
    return f"{WINDOWS_ROOT}/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s_version}/image_id"


def alias_parameters(alias: str, k8s_version: str) -> dict[str, list[list[JSON]]]:
    """SSM parameter name → the requirement sets (without architecture) of the image it names, for ``alias``.

    Raises:
        ValueError: a malformed alias or an unknown family.
        UnsupportedAliasError: AL2 on Kubernetes 1.33+, Windows 2025 before 1.35.
    """
    family, version = parse_alias(alias)
    if family in WINDOWS_BUILDS:
        if family == "Windows2025" and (_minor(k8s_version) or 99) < 35:
            raise UnsupportedAliasError(
                f"Windows Server 2025 requires EKS version 1.35 or higher, current version: {k8s_version}"
            )
        reqs = [
            _requirement(wk.LABEL_OS, "In", "windows"),
            _requirement(wk.LABEL_WINDOWS_BUILD, "In", WINDOWS_BUILDS[family]),
        ]
        return {windows_parameter(family, k8s_version): [reqs]}
    paths = {"AL2023": _al2023, "AL2": _al2, "Bottlerocket": _bottlerocket}[family](k8s_version, version)
    return {path: [variant_requirements(v) for v in variants] for path, variants in paths.items()}


@attrs.frozen
class ImageQuery:
    """One DescribeImages query (Karpenter's ``DescribeImageQuery``): ``filters`` and ``owners`` as EC2 takes
    them; ``known`` maps image ids found through SSM to their requirement sets (without architecture)."""

    filters: list[JSON] = attrs.field(factory=list)
    owners: list[str] = attrs.field(factory=list)
    known: dict[str, list[list[JSON]]] = attrs.field(factory=dict)

    def requirement_sets(self, image_id: str, arch: str) -> list[list[JSON]]:
        """The requirement sets of one image: each known set plus its architecture (architecture alone else)."""
        arch_req = _requirement(wk.LABEL_ARCH, "In", arch)
        sets = self.known.get(image_id) or [[]]
        return [sorted([*reqs, arch_req], key=lambda r: (len(str(r["key"])), str(r["key"]))) for reqs in sets]


async def _parameter(ssm: Any, name: str) -> str | None:
    """An SSM parameter's value, None when it does not exist (other errors propagate)."""
    try:
        response = await ssm.get_parameter(Name=name)
    except Exception as err:
        if is_not_found(err):
            return None
        raise
    return str(response["Parameter"]["Value"])


async def _alias_query(ssm: Any, alias: str, k8s_version: str) -> ImageQuery | None:
    # One GetParameter per name, as Karpenter's SSM provider reads them: its controller IAM policy allows
    # ssm:GetParameter on /aws/service/* and not GetParameters, so a role made for Karpenter works unchanged.
    known: dict[str, list[list[JSON]]] = {}
    for name, sets in alias_parameters(alias, k8s_version).items():
        value = await _parameter(ssm, name)
        if value is None:
            continue
        for reqs in sets:
            if reqs not in known.setdefault(value, []):
                known[value].append(reqs)
    if not known:
        return None
    return ImageQuery(filters=[{"Name": "image-id", "Values": sorted(known)}], known=known)


async def image_queries(ssm: Any, terms: Sequence[Mapping[str, Any]], k8s_version: str) -> list[ImageQuery]:
    """Karpenter's ``DescribeImageQueries``: the alias query, or one query per name/tags/owner term plus one
    ``image-id`` query for every id and ``ssmParameter`` term (a parameter that does not exist, or whose value
    is not an ``ami-`` id, is skipped).

    Raises:
        ValueError, UnsupportedAliasError: see :func:`alias_parameters`.
        botocore ClientError (or a connection error): an SSM read failed.
    """
    alias = next((str(t["alias"]) for t in terms if t.get("alias")), None)
    if alias is not None:
        query = await _alias_query(ssm, alias, k8s_version)
        return [query] if query is not None else []
    ids: list[str] = []
    queries: list[ImageQuery] = []
    for term in terms:
        if term.get("id"):
            ids.append(str(term["id"]))
        elif term.get("ssmParameter"):
            value = await _parameter(ssm, str(term["ssmParameter"]))
            if value is not None and value.startswith("ami-"):
                ids.append(value)
        else:
            owner = str(term.get("owner") or "")
            filters: list[JSON] = []
            owners = [owner] if owner else []
            if term.get("name"):
                # Karpenter defaults a name's owners to self and amazon, so a name never matches an image
                # some stranger shared publicly.
                owners = owners or ["self", "amazon"]
                filters.append({"Name": "name", "Values": [str(term["name"])]})
            filters += tag_filters(term.get("tags") or {})
            queries.append(ImageQuery(filters=filters, owners=owners))
    if ids:
        queries.append(ImageQuery(filters=[{"Name": "image-id", "Values": ids}]))
    return queries


def _time(value: Any, default: datetime) -> datetime:
    """An EC2 timestamp (``2025-01-01T00:00:00.000Z``) as an aware datetime; ``default`` when empty/malformed."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value or "").replace("Z", "+00:00"))
    except ValueError:
        return default
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


OLDEST: Final = datetime.min.replace(tzinfo=UTC)
NEVER: Final = datetime.max.replace(tzinfo=UTC)


@attrs.frozen
class _Candidate:
    image_id: str
    name: str
    created: datetime
    deprecated: bool
    requirements: list[JSON]

    def better_than(self, other: _Candidate) -> bool:
        """Karpenter's ``compareAMI``: non-deprecated first, then newer, then the greater name."""
        if self.deprecated != other.deprecated:
            return not self.deprecated
        if self.created != other.created:
            return self.created > other.created
        return self.name > other.name


async def _images(ec2: Any, query: ImageQuery) -> list[JSON]:
    """DescribeImages for one query: available images only, deprecated ones included, every page."""
    kwargs: JSON = {
        "Filters": [*query.filters, {"Name": "state", "Values": ["available"]}],
        "IncludeDeprecated": True,
        "MaxResults": 1000,
    }
    if query.owners:
        kwargs["Owners"] = list(query.owners)
    images: list[JSON] = []
    while True:
        response = await ec2.describe_images(**kwargs)
        images += response.get("Images") or []
        if not response.get("NextToken"):
            return images
        kwargs["NextToken"] = response["NextToken"]


async def resolve_amis(
    ec2: Any,
    ssm: Any,
    terms: Sequence[Mapping[str, Any]],
    k8s_version: str,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[JSON]:
    """``status.amis`` entries ``{id, name, requirements[, deprecated]}``: per requirement set the best image
    (see the module docstring), newest first. ``now`` is the wall clock deprecation times are compared with.

    Raises:
        ValueError, UnsupportedAliasError: see :func:`alias_parameters`.
        botocore ClientError (or a connection error): SSM or DescribeImages failed.
    """
    best: dict[str, _Candidate] = {}
    at = now()
    for query in await image_queries(ssm, terms, k8s_version):
        for image in await _images(ec2, query):
            arch = ARCHITECTURES.get(str(image.get("Architecture") or ""))
            if arch is None:
                continue
            for reqs in query.requirement_sets(str(image["ImageId"]), arch):
                candidate = _Candidate(
                    image_id=str(image["ImageId"]),
                    name=str(image.get("Name") or ""),
                    created=_time(image.get("CreationDate"), OLDEST),
                    deprecated=_time(image.get("DeprecationTime"), NEVER) <= at,
                    requirements=reqs,
                )
                key = stable_hash(sorted(json.dumps(r, sort_keys=True) for r in reqs))
                if key not in best or candidate.better_than(best[key]):
                    best[key] = candidate
    winners = sorted(best.values(), key=lambda c: (-c.created.timestamp(), c.image_id))
    return [_status_entry(c) for c in winners]


def _status_entry(candidate: _Candidate) -> JSON:
    entry: JSON = {"id": candidate.image_id}
    if candidate.deprecated:
        entry["deprecated"] = True
    if candidate.name:
        entry["name"] = candidate.name
    entry["requirements"] = candidate.requirements
    return entry


class AMIProvider:
    """:func:`resolve_amis` cached per (selector terms, Kubernetes version) for ``ttl`` seconds.

    ``ttl`` is ``AMI_REFRESH_INTERVAL`` (default :data:`karpy.aws.cache.AMIS`, 60 s); a failed read is not
    cached (the exception propagates and the next call reads again). Callers get their own copy of the list.
    ``now`` is the wall clock deprecation times are compared with.
    """

    def __init__(
        self,
        ec2: Any,
        ssm: Any,
        k8s_version: str,
        *,
        ttl: float = AMIS.seconds,
        clock: Timer = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ec2 = ec2
        self.ssm = ssm
        self.k8s_version = k8s_version
        self._now = now
        self._cache = ttl_cache(ttl, clock)

    async def resolve(self, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
        """``status.amis`` for ``terms`` (see :func:`resolve_amis`; same errors)."""
        key = (json.dumps(list(terms), sort_keys=True, default=str), self.k8s_version)
        cached: list[JSON] | None = self._cache.get(key)
        if cached is None:
            cached = await resolve_amis(self.ec2, self.ssm, terms, self.k8s_version, now=self._now)
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
