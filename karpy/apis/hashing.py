"""Drift hashes, computed exactly as Karpenter v1.15 computes them, so karpy adopts NodeClaims Karpenter left.

NodePools and their NodeClaims carry ``karpenter.sh/nodepool-hash``, EC2NodeClasses and their NodeClaims
``karpenter.k8s.aws/ec2nodeclass-hash``; a NodeClaim whose hash differs from its owner's (same hash version)
has drifted. Karpenter computes both with ``github.com/mitchellh/hashstructure/v2`` (``FormatV2``, options
``SlicesAsSets``, ``IgnoreZeroValue``, ``ZeroNil``) over Go structs and writes the ``uint64`` in decimal:

- ``NodePool.Hash()`` (core ``pkg/apis/v1/nodepool.go``) hashes ``spec.template`` as the Go
  ``NodeClaimTemplate``: template labels/annotations, taints, startup taints, nodeClassRef,
  terminationGracePeriod and expireAfter (requirements carry ``hash:"ignore"``);
- ``EC2NodeClass.Hash(caBundle)`` (AWS ``pkg/apis/v1/ec2nodeclass.go``) hashes the list
  ``[spec, AMIFamily(), caBundle or "", kubelet.String()]`` (selector terms, ``amiFamily``, ``ipPrefixCount``
  and ``kubelet`` carry ``hash:"ignore"``; the AMI family enters as the alias resolves it, the kubelet map as
  its JSON text).

This module reproduces hashstructure's walk over a small typed model of those Go structs (field names, Go
declaration order, kinds, pointer-ness and hash tags; only what is hashed or decides a zero value), built
from the JSON object as the API server stores it (CRD defaults applied). hashstructure v2's walk, in short:

- the hasher is Go's ``fnv.New64()`` (FNV-1, 64 bit), reset for every primitive;
- strings hash their bytes; ints/bools are ``binary.Write`` little-endian of the Go kind (``int`` as int64,
  ``int32`` 4 bytes, ``bool`` as one int8 byte); a ``time.Time`` hashes its ``MarshalBinary`` bytes;
  pointers and interfaces are followed (``ZeroNil``: a nil pointer hashes as its element type's zero value);
- a slice is the XOR of its elements' hashes (``SlicesAsSets``, so order never matters; no finishing step);
- a map is ``fnv(le64(XOR over entries of fnv(le64(h(k)) + le64(h(v)))))``;
- a struct starts from the hash of its type name; every exported field that is not ``hash:"ignore"`` and
  (``IgnoreZeroValue``) not Go's zero value contributes ``h = fnv(le64(h ^ fnv(le64(h(name)) + le64(h(v)))))``;
  ``hash:"string"`` hashes the field's ``String()``.

No I/O: every input is a parameter.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import re
import struct as binary
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from karpy.apis.quantity import QuantityError, parse_quantity

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def stable_hash(value: Any) -> str:
    """Decimal string of the first 8 bytes of SHA-256 over canonical JSON (sorted keys, no spaces).

    karpy's own content hash for names only karpy compares (launch template names, AMI cache keys, instance
    profile names); the drift hashes are :func:`nodepool_hash` and :func:`nodeclass_hash`.
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return str(int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big"))


# --- hashstructure v2 primitives ---------------------------------------------------------------------------


def fnv1_64(data: bytes) -> int:
    """Go's ``hash/fnv`` ``New64`` (FNV-1: multiply, then XOR) over ``data``."""
    h = _FNV64_OFFSET
    for byte in data:
        h = ((h * _FNV64_PRIME) & _MASK64) ^ byte
    return h


def _le64(value: int) -> bytes:
    return (value & _MASK64).to_bytes(8, "little")


def _ordered(a: int, b: int) -> int:
    """hashstructure's ``hashUpdateOrdered``: FNV over both values, little-endian."""
    return fnv1_64(_le64(a) + _le64(b))


def _finish(a: int) -> int:
    """hashstructure's ``hashFinishUnordered``: FNV over the XOR-accumulated value."""
    return fnv1_64(_le64(a))


def _hash_str(value: str) -> int:
    return fnv1_64(value.encode())


# --- A typed model of the hashed Go structs ---------------------------------------------------------------


@dataclass(frozen=True)
class GoType:
    """A Go type as hashstructure sees it. ``kind``: ``string``, ``int32``, ``int64``, ``bool``, ``duration``
    (``time.Duration`` from a Go duration string), ``quantity`` (``resource.Quantity`` as its canonical
    string, for ``hash:"string"`` fields), ``map`` (string to string), ``slice`` (of ``elem``) or ``struct``."""

    kind: str
    name: str = ""
    fields: tuple[GoField, ...] = ()
    elem: GoType | None = None


@dataclass(frozen=True)
class GoField:
    """One struct field: Go ``name``, JSON key ``json`` (empty: embedded, reads the parent object), ``type``,
    whether it is a Go pointer (then only a missing/null value is zero) and whether it is ``hash:"ignore"``
    (then it only takes part in the parent's zero-value test)."""

    name: str
    json: str
    type: GoType
    pointer: bool = False
    ignore: bool = False
    embedded: bool = field(default=False)


STRING = GoType("string")
INT32 = GoType("int32")
INT64 = GoType("int64")
BOOL = GoType("bool")
DURATION = GoType("duration")
QUANTITY = GoType("quantity")
STRING_MAP = GoType("map")
OPAQUE_SLICE = GoType("slice", elem=STRING)  # an ignored list: only its nil-ness matters


def _struct(name: str, *fields: GoField) -> GoType:
    return GoType("struct", name=name, fields=fields)


def _slice(elem: GoType) -> GoType:
    return GoType("slice", elem=elem)


TIME = GoType("time")
# metav1.Time{time.Time}
METAV1_TIME = _struct("Time", GoField("Time", "", TIME, embedded=True))
# k8s.io/api core/v1 Taint
TAINT = _struct(
    "Taint",
    GoField("Key", "key", STRING),
    GoField("Value", "value", STRING),
    GoField("Effect", "effect", STRING),
    GoField("TimeAdded", "timeAdded", METAV1_TIME, pointer=True),
)
# metav1.Duration{Duration time.Duration}
METAV1_DURATION = _struct("Duration", GoField("Duration", "", DURATION, embedded=True))
# core pkg/apis/v1/duration.go NillableDuration{*time.Duration; Raw []byte `hash:"ignore"`}: "Never" is nil.
NILLABLE_DURATION = _struct("NillableDuration", GoField("Duration", "", DURATION, pointer=True, embedded=True))
NODE_CLASS_REFERENCE = _struct(
    "NodeClassReference",
    GoField("Kind", "kind", STRING),
    GoField("Name", "name", STRING),
    GoField("Group", "group", STRING),
)
# core pkg/apis/v1/nodepool.go
NODECLAIM_TEMPLATE_SPEC = _struct(
    "NodeClaimTemplateSpec",
    GoField("Taints", "taints", _slice(TAINT)),
    GoField("StartupTaints", "startupTaints", _slice(TAINT)),
    GoField("Requirements", "requirements", OPAQUE_SLICE, ignore=True),
    GoField("NodeClassRef", "nodeClassRef", NODE_CLASS_REFERENCE, pointer=True),
    GoField("TerminationGracePeriod", "terminationGracePeriod", METAV1_DURATION, pointer=True),
    GoField("ExpireAfter", "expireAfter", NILLABLE_DURATION),
)
TEMPLATE_OBJECT_META = _struct(
    "ObjectMeta", GoField("Labels", "labels", STRING_MAP), GoField("Annotations", "annotations", STRING_MAP)
)
NODECLAIM_TEMPLATE = _struct(
    "NodeClaimTemplate",
    GoField("ObjectMeta", "metadata", TEMPLATE_OBJECT_META),
    GoField("Spec", "spec", NODECLAIM_TEMPLATE_SPEC),
)

# AWS pkg/apis/v1/ec2nodeclass.go
PLACEMENT_GROUP_SELECTOR = _struct(
    "PlacementGroupSelector", GoField("Name", "name", STRING, pointer=True), GoField("ID", "id", STRING, pointer=True)
)
BLOCK_DEVICE = _struct(
    "BlockDevice",
    GoField("DeleteOnTermination", "deleteOnTermination", BOOL, pointer=True),
    GoField("Encrypted", "encrypted", BOOL, pointer=True),
    GoField("IOPS", "iops", INT64, pointer=True),
    GoField("KMSKeyID", "kmsKeyID", STRING, pointer=True),
    GoField("SnapshotID", "snapshotID", STRING, pointer=True),
    GoField("Throughput", "throughput", INT64, pointer=True),
    GoField("VolumeInitializationRate", "volumeInitializationRate", INT32, pointer=True),
    GoField("VolumeSize", "volumeSize", QUANTITY, pointer=True),  # hash:"string"
    GoField("VolumeType", "volumeType", STRING, pointer=True),
)
BLOCK_DEVICE_MAPPING = _struct(
    "BlockDeviceMapping",
    GoField("DeviceName", "deviceName", STRING, pointer=True),
    GoField("EBS", "ebs", BLOCK_DEVICE, pointer=True),
    GoField("RootVolume", "rootVolume", BOOL),
)
NETWORK_INTERFACE = _struct(
    "NetworkInterface",
    GoField("NetworkCardIndex", "networkCardIndex", INT32),
    GoField("DeviceIndex", "deviceIndex", INT32),
    GoField("InterfaceType", "interfaceType", STRING),
)
METADATA_OPTIONS = _struct(
    "MetadataOptions",
    GoField("HTTPEndpoint", "httpEndpoint", STRING, pointer=True),
    GoField("HTTPProtocolIPv6", "httpProtocolIPv6", STRING, pointer=True),
    GoField("HTTPPutResponseHopLimit", "httpPutResponseHopLimit", INT64, pointer=True),
    GoField("HTTPTokens", "httpTokens", STRING, pointer=True),
)
ENCLAVE_OPTIONS = _struct("EnclaveOptions", GoField("Enabled", "enabled", BOOL))
CONNECTION_TRACKING = _struct(
    "ConnectionTracking",
    GoField("TCPEstablishedTimeout", "tcpEstablishedTimeout", INT32, pointer=True),
    GoField("UDPStreamTimeout", "udpStreamTimeout", INT32, pointer=True),
    GoField("UDPTimeout", "udpTimeout", INT32, pointer=True),
)
CPU_OPTIONS = _struct("CPUOptions", GoField("NestedVirtualization", "nestedVirtualization", STRING, pointer=True))
EC2NODECLASS_SPEC = _struct(
    "EC2NodeClassSpec",
    GoField("SubnetSelectorTerms", "subnetSelectorTerms", OPAQUE_SLICE, ignore=True),
    GoField("SecurityGroupSelectorTerms", "securityGroupSelectorTerms", OPAQUE_SLICE, ignore=True),
    GoField("CapacityReservationSelectorTerms", "capacityReservationSelectorTerms", OPAQUE_SLICE, ignore=True),
    GoField("PlacementGroupSelector", "placementGroupSelector", PLACEMENT_GROUP_SELECTOR, pointer=True),
    GoField("AssociatePublicIPAddress", "associatePublicIPAddress", BOOL, pointer=True),
    GoField("IPPrefixCount", "ipPrefixCount", INT32, pointer=True, ignore=True),
    GoField("AMISelectorTerms", "amiSelectorTerms", OPAQUE_SLICE, ignore=True),
    GoField("AMIFamily", "amiFamily", STRING, pointer=True, ignore=True),
    GoField("UserData", "userData", STRING, pointer=True),
    GoField("Role", "role", STRING),
    GoField("InstanceProfile", "instanceProfile", STRING, pointer=True),
    GoField("Tags", "tags", STRING_MAP),
    GoField("Kubelet", "kubelet", STRING_MAP, ignore=True),
    GoField("BlockDeviceMappings", "blockDeviceMappings", _slice(BLOCK_DEVICE_MAPPING)),
    GoField("InstanceStorePolicy", "instanceStorePolicy", STRING, pointer=True),
    GoField("NetworkInterfaces", "networkInterfaces", _slice(NETWORK_INTERFACE)),
    GoField("DetailedMonitoring", "detailedMonitoring", BOOL, pointer=True),
    GoField("MetadataOptions", "metadataOptions", METADATA_OPTIONS, pointer=True),
    GoField("EnclaveOptions", "enclaveOptions", ENCLAVE_OPTIONS, pointer=True),
    GoField("ConnectionTracking", "connectionTracking", CONNECTION_TRACKING, pointer=True),
    GoField("Context", "context", STRING, pointer=True),
    GoField("CPUOptions", "cpuOptions", CPU_OPTIONS, pointer=True),
)


# --- Go value semantics -----------------------------------------------------------------------------------

_DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_DURATION_UNITS["h"] = 3600 * 10**9
_DURATION_PART = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")


def go_duration_ns(text: str) -> int:
    """Go ``time.ParseDuration`` in nanoseconds (``"720h"``, ``"1h30m"``, ``"-1.5s"``, ``"0"``).

    Raises:
        ValueError: not a Go duration.
    """
    sign = -1 if text.startswith("-") else 1
    rest = text[1:] if text[:1] in ("+", "-") else text  # one sign at most, as Go
    if rest == "0":
        return 0
    total = Decimal(0)
    pos = 0
    while pos < len(rest):
        match = _DURATION_PART.match(rest, pos)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(f"invalid duration {text!r}")
        total += Decimal(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not rest:
        raise ValueError(f"invalid duration {text!r}")
    return sign * int(total)


_SECONDS_YEAR1_TO_UNIX = 62_135_596_800


def go_time_binary(text: str) -> bytes:
    """``time.Time.MarshalBinary`` (version 1) of an RFC 3339 ``metav1.Time`` (``""``: the zero time) as
    Karpenter decodes it: ``metav1.Time.UnmarshalJSON`` converts to the process's local zone, UTC in
    Karpenter's container, so the offset is 0 minutes (not the -1 that marks the UTC location itself).

    Raises:
        ValueError: not an RFC 3339 time.
    """
    if not text:
        return b"\x01" + (0).to_bytes(8, "big") + (0).to_bytes(4, "big") + (-1).to_bytes(2, "big", signed=True)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    seconds = calendar.timegm(moment.timetuple()) + _SECONDS_YEAR1_TO_UNIX
    nanos = moment.microsecond * 1000
    return b"\x01" + seconds.to_bytes(8, "big", signed=True) + nanos.to_bytes(4, "big") + (0).to_bytes(2, "big")


_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ((60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki"))


def canonical_quantity(value: str | int | float) -> str:
    """``resource.Quantity.String()``: the canonical form the API server would print (``"1024Mi"`` →
    ``"1Gi"``, ``"1000"`` → ``"1k"``, ``"0.5"`` → ``"500m"``), following apimachinery
    ``pkg/api/resource/quantity.go`` ``CanonicalizeBytes`` (values rounded up to nano precision).

    Raises:
        QuantityError: not a quantity.
    """
    text = str(value).strip()
    amount = parse_quantity(value)
    binary_format = bool(re.search(r"[KMGTPE]i$", text))
    exponent_format = bool(re.search(r"\d[eE][+-]?\d+$", text))
    nanos = math.ceil(amount * Decimal(10**9))
    if binary_format and abs(nanos) >= 1024 * 10**9 and nanos % 10**9 == 0:
        whole = nanos // 10**9
        for bits, suffix in _BINARY_SUFFIXES:
            if whole % (1 << bits) == 0:
                return f"{whole >> bits}{suffix}"
        return str(whole)
    if nanos == 0:
        return "0"
    exponent = -9
    mantissa = nanos
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa //= 1000
        exponent += 3
    if exponent_format:
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return int(str(value))


def _is_zero(gotype: GoType, value: Any, pointer: bool) -> bool:
    """reflect ``Value.IsZero`` of the Go value ``value`` would decode into (a missing key is ``None``)."""
    if value is None:
        return True
    if pointer:
        return False
    kind = gotype.kind
    if kind == "string":
        return bool(value == "")
    if kind in ("int32", "int64", "duration"):
        return _scalar(gotype, value) == 0
    if kind == "time":
        return bool(value == "")
    if kind == "bool":
        return value is False
    if kind in ("map", "slice", "quantity"):
        return False  # a present list/map decodes non-nil, even when empty
    return all(_is_zero(f.type, _field_value(f, value), f.pointer) for f in gotype.fields)


def _field_value(f: GoField, obj: Any) -> Any:
    if f.embedded:  # an embedded time.Duration decodes from the parent's own JSON value
        return obj
    return obj.get(f.json) if isinstance(obj, Mapping) else None


def _scalar(gotype: GoType, value: Any) -> int:
    if gotype.kind == "duration":
        return go_duration_ns(value) if isinstance(value, str) else _as_int(value)
    return _as_int(value)


def _hash_value(gotype: GoType, value: Any) -> int:
    """hashstructure's ``visit`` for the Go value ``value`` decodes into (``None``: the zero value)."""
    kind = gotype.kind
    if kind == "string":
        return _hash_str("" if value is None else str(value))
    if kind == "quantity":
        return _hash_str("0" if value is None else canonical_quantity(value))
    if kind == "bool":
        return fnv1_64(binary.pack("<b", 1 if value else 0))
    if kind == "int32":
        return fnv1_64(binary.pack("<i", 0 if value is None else _as_int(value)))
    if kind in ("int64", "duration"):
        return fnv1_64(binary.pack("<q", 0 if value is None else _scalar(gotype, value)))
    if kind == "time":
        return fnv1_64(go_time_binary(str(value or "")))
    if kind == "map":
        acc = 0
        for k, v in (value or {}).items():
            acc ^= _ordered(_hash_str(str(k)), _hash_str("" if v is None else str(v)))
        return _finish(acc)
    if kind == "slice":
        assert gotype.elem is not None
        acc = 0
        for item in value or ():
            acc ^= _hash_value(gotype.elem, item)
        return acc
    return _hash_struct(gotype, value)


def _hash_struct(gotype: GoType, value: Any) -> int:
    h = _hash_str(gotype.name)
    for f in gotype.fields:
        if f.ignore:
            continue
        inner = _field_value(f, value)
        if _is_zero(f.type, inner, f.pointer):
            continue
        h = _finish(h ^ _ordered(_hash_str(f.name), _hash_value(f.type, inner)))
    return h


def _hash_set(elements: Sequence[int]) -> int:
    acc = 0
    for element in elements:
        acc ^= element
    return acc


def _nillable_duration(value: Any) -> Any:
    """The JSON of a NillableDuration as the embedded pointer sees it: ``None`` for ``"Never"``/missing."""
    return None if value in (None, "Never") else value


# --- Karpenter's two hashes -------------------------------------------------------------------------------


def nodepool_hash(nodepool: Mapping[str, Any]) -> str:
    """Karpenter's ``karpenter.sh/nodepool-hash`` for a NodePool object (as stored: CRD defaults applied):
    the decimal hashstructure v2 hash of ``spec.template`` as core ``NodePool.Hash()`` computes it
    (requirements excluded; disruption, limits and weight are outside the template).

    Raises:
        ValueError: a duration or time the CRD schema would have rejected.
    """
    template = (nodepool.get("spec") or {}).get("template") or {}
    spec = dict(template.get("spec") or {})
    if "expireAfter" in spec:
        spec["expireAfter"] = _nillable_duration(spec["expireAfter"])
    shaped = {"metadata": template.get("metadata"), "spec": spec}
    return str(_hash_value(NODECLAIM_TEMPLATE, shaped))


AMI_FAMILIES = ("AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Windows2025")


def nodeclass_ami_family(spec: Mapping[str, Any]) -> str:
    """``EC2NodeClass.AMIFamily()``: ``amiFamily`` if set, else the family of the first ``alias`` selector term
    (``al2023@latest`` → ``AL2023``), else ``Custom``."""
    family = spec.get("amiFamily")
    if family:
        return str(family)
    for term in spec.get("amiSelectorTerms") or ():
        alias = (term or {}).get("alias")
        if alias:
            name = str(alias).split("@", 1)[0]
            return next((f for f in AMI_FAMILIES if f.lower() == name), name)
    return "Custom"


def _go_json(value: Any) -> str:
    """``encoding/json`` Marshal of a decoded JSON value: sorted keys, compact, HTML-safe escapes."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, Mapping):
        items = sorted(value.items())
        return "{" + ",".join(f"{_go_json(str(k))}:{_go_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
            text = text.replace(char, escape)
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


def kubelet_string(kubelet: Mapping[str, Any] | None) -> str:
    """``KubeletConfiguration.String()``: ``"null"`` when empty, else its Go JSON encoding."""
    return "null" if not kubelet else _go_json(kubelet)


def nodeclass_hash(nodeclass: Mapping[str, Any], ca_bundle: str | None = None) -> str:
    """Karpenter's ``karpenter.k8s.aws/ec2nodeclass-hash`` for an EC2NodeClass object (as stored: CRD defaults
    applied), as AWS ``EC2NodeClass.Hash(caBundle)`` computes it: the decimal hashstructure v2 hash of
    ``[spec, AMIFamily(), caBundle or "", kubelet as JSON]``. ``ca_bundle`` is the cluster CA bundle Karpenter
    was started with (``CLUSTER_CA_BUNDLE``, else the base64 of its kubeconfig's CA data); ``None`` hashes
    as Karpenter does without one.

    Raises:
        ValueError: a quantity the CRD schema would have rejected.
    """
    spec = nodeclass.get("spec") or {}
    elements = [
        _hash_value(EC2NODECLASS_SPEC, spec),
        _hash_str(nodeclass_ami_family(spec)),
        _hash_str(ca_bundle or ""),
        _hash_str(kubelet_string(spec.get("kubelet"))),
    ]
    return str(_hash_set(elements))


# --- karpy's hashes before it computed Karpenter's (same annotation keys and versions: v3, v6) --------------


def legacy_nodepool_hash(nodepool: Mapping[str, Any]) -> str:
    """The ``karpenter.sh/nodepool-hash`` karpy wrote before it computed Karpenter's (SHA-256 over the template's
    JSON without requirements), under the same version ``v3``: only to recognise NodeClaims karpy stamped
    from a NodePool's current spec, so that they are re-stamped instead of drifted."""
    template = dict((nodepool.get("spec") or {}).get("template") or {})
    spec = dict(template.get("spec") or {})
    spec.pop("requirements", None)
    template["spec"] = spec
    return stable_hash(template)


def legacy_nodeclass_hash(nodeclass: Mapping[str, Any]) -> str:
    """The ``karpenter.k8s.aws/ec2nodeclass-hash`` karpy wrote before it computed Karpenter's (SHA-256 over the
    spec's JSON without selector terms and ``amiFamily``), under the same version ``v6``; see
    :func:`legacy_nodepool_hash`."""
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


__all__ = [
    "QuantityError",
    "canonical_quantity",
    "fnv1_64",
    "go_duration_ns",
    "go_time_binary",
    "kubelet_string",
    "legacy_nodeclass_hash",
    "legacy_nodepool_hash",
    "nodeclass_ami_family",
    "nodeclass_hash",
    "nodepool_hash",
    "stable_hash",
]
