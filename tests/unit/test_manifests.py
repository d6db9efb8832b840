"""karpy's install manifests and examples, checked without a cluster.

The CRDs must stay schema-compatible with Karpenter v1.15 (a Karpenter user's NodePool, NodeClaim,
EC2NodeClass, NodeOverlay and CapacityBuffer apply unchanged; tests/reference diffs them path by path), the
kustomize base must install everything, and the controller must run
non-root with its probes on HEALTH_PROBE_PORT. CEL rules cannot be evaluated here: they are exercised
against the real apiserver by the integration tests; this file checks everything else structurally,
including the examples against the CRDs' OpenAPI schemas with a small validator.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.apis import labels as wk
from karpy.kube import resources as kube_resources
from karpy.settings import from_environment

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CRDS = MANIFESTS / "crds"
EXAMPLES = MANIFESTS / "examples"

JSON = dict[str, Any]


def load(path: Path) -> list[JSON]:
    """Every non-empty YAML document of a file."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def load_one(path: Path) -> JSON:
    docs = load(path)
    assert len(docs) == 1, f"{path.name}: expected one document, got {len(docs)}"
    return docs[0]


def crd(name: str) -> JSON:
    """The CRD ``<plural>.<group>``, from upstream's file name ``crds/<group>_<plural>.yaml``."""
    plural, group = name.split(".", 1)
    return load_one(CRDS / f"{group}_{plural}.yaml")


def crd_file(name: str) -> Path:
    plural, group = name.split(".", 1)
    return CRDS / f"{group}_{plural}.yaml"


def schema_of(plural_group: str) -> JSON:
    schema: JSON = crd(plural_group)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def by_kind(docs: list[JSON], kind: str) -> list[JSON]:
    return [d for d in docs if d.get("kind") == kind]


def all_manifest_docs() -> list[JSON]:
    return [d for f in sorted(MANIFESTS.glob("*.yaml")) if f.name != "kustomization.yaml" for d in load(f)]


# --- a small OpenAPI v3 validator (the subset CRD structural schemas use) --------------------------------

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def validate(value: Any, schema: JSON, path: str = "") -> list[str]:
    """Errors of ``value`` against a structural schema: types, enums, patterns, bounds, required and
    unknown fields (which ``kubectl apply``'s strict field validation rejects). CEL rules are skipped."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str | int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: want int or string, got {value!r}"]
    kind = schema.get("type")
    if kind and (not isinstance(value, _TYPES[kind]) or (kind != "boolean" and isinstance(value, bool))):
        return [f"{path}: want {kind}, got {type(value).__name__} {value!r}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        errors += _validate_string(value, schema, path)
    elif isinstance(value, int | float):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    elif isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
            errors.append(f"{path}: {len(value)} items outside [{schema.get('minItems', 0)}, {schema.get('maxItems')}]")
        for i, item in enumerate(value):
            errors += validate(item, schema.get("items", {}), f"{path}[{i}]")
    elif isinstance(value, dict):
        errors += _validate_object(value, schema, path)
    return errors


def _validate_string(value: str, schema: JSON, path: str) -> list[str]:
    errors = []
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
        errors.append(f"{path}: length {len(value)} out of bounds")
    if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
        errors.append(f"{path}: {value!r} is not a date-time")
    return errors


def _validate_object(value: JSON, schema: JSON, path: str) -> list[str]:
    errors = [f"{path}.{key}: required" for key in schema.get("required", []) if key not in value]
    if len(value) > schema.get("maxProperties", len(value)):
        errors.append(f"{path}: more than {schema['maxProperties']} properties")
    props: JSON = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    if path.endswith(".metadata") and not props:
        return errors  # ObjectMeta: validated by the apiserver itself, not by the CRD schema
    for key, item in value.items():
        if key in props:
            errors += validate(item, props[key], f"{path}.{key}")
        elif isinstance(extra, dict):
            errors += validate(item, extra, f"{path}.{key}")
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}.{key}: unknown field")
    return errors


def walk(schema: JSON, path: str = "") -> Iterator[tuple[str, JSON]]:
    """Every schema node with its path."""
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def rules(plural_group: str) -> dict[str, str]:
    """message -> CEL rule of every x-kubernetes-validations entry in a CRD."""
    out = {}
    for _, node in walk(schema_of(plural_group)):
        for v in node.get("x-kubernetes-validations", []):
            out[v["message"]] = v["rule"]
    return out


# --- CRDs ------------------------------------------------------------------------------------------------

CRD_NAMES = {
    "nodepools.karpenter.sh": ("karpenter.sh", "NodePool", "nodepool", []),
    "nodeclaims.karpenter.sh": ("karpenter.sh", "NodeClaim", "nodeclaim", []),
    "ec2nodeclasses.karpenter.k8s.aws": ("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclass", ["ec2nc", "ec2ncs"]),
}
# Karpenter v1.15 also ships these two; karpy accepts and stores them (group, kind, singular, short names,
# category, scope, version).
EXTRA_CRDS = {
    "nodeoverlays.karpenter.sh": (
        "karpenter.sh",
        "NodeOverlay",
        "nodeoverlay",
        ["overlays"],
        "karpenter",
        "Cluster",
        "v1alpha1",
    ),
    "capacitybuffers.autoscaling.x-k8s.io": (
        "autoscaling.x-k8s.io",
        "CapacityBuffer",
        "capacitybuffer",
        ["cb"],
        "autoscaling",
        "Namespaced",
        "v1beta1",
    ),
}
ALL_CRDS = sorted(CRD_NAMES.keys() | EXTRA_CRDS.keys())


def test_crd_directory_holds_exactly_karpenters_crds() -> None:
    """manifests/crds/ has one file per CRD Karpenter v1.15 ships, named <group>_<plural>.yaml like upstream."""
    names = {load_one(f)["metadata"]["name"] for f in CRDS.glob("*.yaml")}
    assert names == set(ALL_CRDS)
    assert all(crd_file(name).is_file() for name in ALL_CRDS)


@pytest.mark.parametrize("name", sorted(EXTRA_CRDS))
def test_extra_crd_identity(name: str) -> None:
    """NodeOverlay and CapacityBuffer: upstream's group, names, scope and single served+storage version."""
    group, kind, singular, short, category, scope, version_name = EXTRA_CRDS[name]
    spec = crd(name)["spec"]
    assert (spec["group"], spec["scope"]) == (group, scope)
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": name.split(".", 1)[0],
        "singular": singular,
        "categories": [category],
        "shortNames": short,
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (version_name, True, True)
    assert version["subresources"]["status"] == {}


@pytest.mark.parametrize("name", sorted(CRD_NAMES))
def test_crd_identity(name: str) -> None:
    """apiextensions v1, the upstream group/names/short names/category, cluster scope, one served+storage v1."""
    group, kind, singular, short = CRD_NAMES[name]
    doc = crd(name)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    spec = doc["spec"]
    assert spec["group"] == group
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": name.split(".", 1)[0],
        "singular": singular,
        "categories": ["karpenter"],
        **({"shortNames": short} if short else {}),
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"]["status"] == {}


def test_nodepool_scale_subresource() -> None:
    """`kubectl scale nodepool` drives static NodePools: spec.replicas against status.nodes."""
    [version] = crd("nodepools.karpenter.sh")["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.nodes",
    }
    assert "scale" not in crd("nodeclaims.karpenter.sh")["spec"]["versions"][0]["subresources"]


PRINTER_COLUMNS = {
    "nodepools.karpenter.sh": [
        ("NodeClass", 0),
        ("Nodes", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Weight", 1),
        ("CPU", 1),
        ("Memory", 1),
    ],
    "nodeclaims.karpenter.sh": [
        ("Type", 0),
        ("Capacity", 0),
        ("Zone", 0),
        ("Node", 0),
        ("Ready", 0),
        ("Age", 0),
        ("ImageID", 1),
        ("ID", 1),
        ("NodePool", 1),
        ("NodeClass", 1),
        ("Drifted", 1),
    ],
    "ec2nodeclasses.karpenter.k8s.aws": [("Ready", 0), ("Age", 0), ("Role", 1)],
}


@pytest.mark.parametrize("name", sorted(PRINTER_COLUMNS))
def test_printer_columns_match_karpenter(name: str) -> None:
    """`kubectl get` shows the same columns, in the same order and priority, as Karpenter."""
    columns = crd(name)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c.get("priority", 0)) for c in columns] == PRINTER_COLUMNS[name]
    for c in columns:
        assert c["type"] == ("date" if c["name"] == "Age" else "integer" if c["name"] == "Weight" else "string")
        assert c["jsonPath"].startswith(".")


@pytest.mark.parametrize("name", ALL_CRDS)
def test_schema_is_structural(name: str) -> None:
    """Every node has a type (or is int-or-string, or a preserved free-form value), required fields exist,
    patterns compile, defaults and enum values are valid against their own schema — what the apiserver demands
    of a structural schema."""
    for path, node in walk(schema_of(name)):
        if node.get("x-kubernetes-int-or-string"):
            assert [a["type"] for a in node["anyOf"]] == ["integer", "string"], path
            continue
        if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            assert set(node) <= {"x-kubernetes-preserve-unknown-fields", "description"}, path
            continue
        assert node.get("type") in _TYPES, f"{name}{path}: missing type"
        assert ("properties" not in node and "additionalProperties" not in node) or node["type"] == "object", path
        assert "items" not in node or node["type"] == "array", path
        for key in node.get("required", []):
            assert key in node.get("properties", {}), f"{name}{path}: required {key} not a property"
        if "pattern" in node:
            re.compile(node["pattern"])
        for value in node.get("enum", []):
            assert isinstance(value, _TYPES[node["type"]]), f"{name}{path}: enum {value!r}"
        if "default" in node:
            assert validate(node["default"], node, path) == [], f"{name}{path}: invalid default"
        for v in node.get("x-kubernetes-validations", []):
            assert set(v) == {"rule", "message"} and v["rule"] and v["message"], f"{name}{path}"


@pytest.mark.parametrize("name", sorted(ALL_CRDS))
def test_status_conditions_have_the_metav1_condition_shape(name: str) -> None:
    """status.conditions carry type/status/reason/message/lastTransitionTime/observedGeneration, as
    operatorpkg's status.Condition (metav1.Condition) requires, as a list map keyed by type. Karpenter v1.15's
    NodeClaim alone makes reason and message optional (reason may be empty)."""
    conditions = schema_of(name)["properties"]["status"]["properties"]["conditions"]
    if name != "nodepools.karpenter.sh" and name != "ec2nodeclasses.karpenter.k8s.aws":
        assert (conditions["x-kubernetes-list-type"], conditions["x-kubernetes-list-map-keys"]) == ("map", ["type"])
    items = conditions["items"]
    assert set(items["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    optional = {"reason", "message"} if name == "nodeclaims.karpenter.sh" else set()
    assert set(items["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"} - optional
    assert items["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    empty_reason = {"type": "Ready", "status": "True", "reason": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}
    assert (validate(empty_reason, items) == []) == (name == "nodeclaims.karpenter.sh")
    assert (
        validate(
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            },
            items,
        )
        == []
    )
    assert validate({"type": "Ready", "status": "Yes", "reason": "", "message": ""}, items) != []


def test_status_fields() -> None:
    """The status fields karpy writes exist with Karpenter's types."""
    np = schema_of("nodepools.karpenter.sh")["properties"]["status"]["properties"]
    assert {"conditions", "resources", "nodes", "nodeClassObservedGeneration"} <= set(np)
    nc = schema_of("nodeclaims.karpenter.sh")["properties"]["status"]["properties"]
    assert set(nc) == {
        "nodeName",
        "providerID",
        "imageID",
        "capacity",
        "allocatable",
        "conditions",
        "lastPodEventTime",
    }
    assert (
        validate(
            {"capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}},
            schema_of("nodeclaims.karpenter.sh")["properties"]["status"],
        )
        == []
    )
    ec2 = schema_of("ec2nodeclasses.karpenter.k8s.aws")["properties"]["status"]["properties"]
    assert {"subnets", "securityGroups", "amis", "instanceProfile", "conditions", "capacityReservations"} <= set(ec2)
    assert ec2["subnets"]["items"]["required"] == ["id", "zone"]


def test_nodepool_defaults() -> None:
    """Karpenter v1.15's defaults: consolidateAfter 0s (also when disruption is given without it),
    WhenEmptyOrUnderutilized (Balanced allowed), one 10% budget (Unhealthy a budget reason), 720h expiry."""
    spec = schema_of("nodepools.karpenter.sh")["properties"]["spec"]
    disruption = spec["properties"]["disruption"]
    assert disruption["default"] == {"consolidateAfter": "0s"}
    assert "required" not in disruption
    assert disruption["properties"]["consolidateAfter"]["default"] == "0s"
    assert disruption["properties"]["consolidationPolicy"]["default"] == "WhenEmptyOrUnderutilized"
    assert disruption["properties"]["consolidationPolicy"]["enum"] == [
        "WhenEmpty",
        "WhenEmptyOrUnderutilized",
        "Balanced",
    ]
    assert disruption["properties"]["budgets"]["default"] == [{"nodes": "10%"}]
    assert disruption["properties"]["budgets"]["items"]["properties"]["reasons"]["items"]["enum"] == [
        "Underutilized",
        "Empty",
        "Drifted",
        "Unhealthy",
    ]
    operator = spec["properties"]["template"]["properties"]["spec"]["properties"]["requirements"]["items"]
    assert operator["properties"]["operator"]["enum"] == [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
        "Gt",
        "Lt",
        "Gte",
        "Lte",
    ]
    template_spec = spec["properties"]["template"]["properties"]["spec"]
    assert template_spec["properties"]["expireAfter"]["default"] == "720h"
    assert template_spec["required"] == ["nodeClassRef", "requirements"]
    assert spec["properties"]["weight"]["minimum"] == 1 and spec["properties"]["weight"]["maximum"] == 100
    nodeclaim = schema_of("nodeclaims.karpenter.sh")["properties"]["spec"]
    assert nodeclaim["properties"]["expireAfter"]["default"] == "720h"


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("consolidateAfter", ["0s", "30s", "1h30m", "Never"], ["30", "1d", "30sfoo", "never"]),
        ("nodes", ["10%", "100%", "0", "25"], ["101%", "-1", "10 %"]),
        ("duration", ["8h", "30m", "1h30m", "8h0s"], ["30s", "1d"]),
        ("schedule", ["@daily", "0 9 * * mon-fri"], ["daily", "0 9 * *"]),
    ],
)
def test_disruption_patterns(field: str, good: list[str], bad: list[str]) -> None:
    """The duration, budget and cron patterns accept and reject what Karpenter's do."""
    disruption = schema_of("nodepools.karpenter.sh")["properties"]["spec"]["properties"]["disruption"]
    node = disruption["properties"].get(field) or disruption["properties"]["budgets"]["items"]["properties"][field]
    assert [v for v in good if not re.search(node["pattern"], v)] == []
    assert [v for v in bad if re.search(node["pattern"], v)] == []


def test_ec2nodeclass_defaults_and_enums() -> None:
    """IMDSv2 required with hop limit 1 by default; the AMI families and alias families of the AWS provider."""
    spec = schema_of("ec2nodeclasses.karpenter.k8s.aws")["properties"]["spec"]
    assert spec["properties"]["metadataOptions"]["default"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    assert spec["properties"]["amiFamily"]["enum"] == [
        "AL2",
        "AL2023",
        "Bottlerocket",
        "Custom",
        "Windows2019",
        "Windows2022",
        "Windows2025",
    ]
    assert spec["required"] == ["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"]
    ami = spec["properties"]["amiSelectorTerms"]
    assert (ami["minItems"], ami["maxItems"]) == (1, 30)
    assert set(ami["items"]["properties"]) == {"alias", "id", "name", "owner", "ssmParameter", "tags"}
    # Newer provider fields, accepted so that current Karpenter manifests apply unchanged; fields Karpenter never
    # had (placementGroup, securityGroupSelectorTerms[].vpcID) are gone.
    assert {
        "capacityReservationSelectorTerms",
        "placementGroupSelector",
        "ipPrefixCount",
        "networkInterfaces",
        "connectionTracking",
        "cpuOptions",
    } <= set(spec["properties"])
    assert "placementGroup" not in spec["properties"]
    assert "vpcID" not in spec["properties"]["securityGroupSelectorTerms"]["items"]["properties"]
    # spec.kubelet is free-form, as in Karpenter v1.15 (validated by the nodeclass controller instead).
    kubelet = spec["properties"]["kubelet"]
    assert kubelet["x-kubernetes-preserve-unknown-fields"] is True and "properties" not in kubelet
    assert validate({"maxPods": 110, "cpuManagerPolicy": "static", "featureGates": {"X": True}}, kubelet) == []


# The CEL rules Karpenter enforces at admission, by the message users see (evaluated against the real
# apiserver by the integration tests).
EXPECTED_RULES = {
    "nodepools.karpenter.sh": [
        'label domain "karpenter.sh" is restricted',
        'label domain "karpenter.k8s.aws" is restricted',
        'label "karpenter.sh/nodepool" is restricted',
        'label "kubernetes.io/hostname" is restricted',
        "requirements with operator 'In' must have a value defined",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        "'schedule' must be set with 'duration'",
        "nodeClassRef.group is immutable",
        "nodeClassRef.kind is immutable",
        "group may not be empty",
        "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        "only 'limits.nodes' is supported on static NodePools",
        "'weight' is not supported on static NodePools",
    ],
    "nodeclaims.karpenter.sh": [
        "spec is immutable",
        'label domain "karpenter.k8s.aws" is restricted',
        "requirements with operator 'In' must have a value defined",
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
    ],
    "ec2nodeclasses.karpenter.k8s.aws": [
        "must specify exactly one of ['role', 'instanceProfile']",
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
        "windows families may only specify version 'latest'",
        "subnetSelectorTerms cannot be empty",
        "securityGroupSelectorTerms cannot be empty",
        "tag contains a restricted tag matching kubernetes.io/cluster/",
        "tag contains a restricted tag matching karpenter.sh/nodepool",
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
        "tag contains a restricted tag matching eks:eks-cluster-name",
        "must have only one blockDeviceMappings with rootVolume",
        "networkInterfaces must include a primary interface with interfaceType='interface'",
        "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        "'name' and 'id' are mutually exclusive",
    ],
    "nodeoverlays.karpenter.sh": [
        'label domain "karpenter.sh" is restricted',
        "cannot set both 'price' and 'priceAdjustment'",
        "invalid resource restricted",
    ],
    "capacitybuffers.autoscaling.x-k8s.io": [
        "You must define either PodTemplateRef or ScalableRef, but not both",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_cel_rules_present(name: str) -> None:
    """Each Karpenter admission rule is declared, with upstream's message."""
    declared = rules(name)
    assert [m for m in EXPECTED_RULES[name] if m not in declared] == []


def test_transition_rules_compare_with_old_self() -> None:
    """Immutability rules are transition rules (they reference oldSelf), so creation is unaffected."""
    assert rules("nodeclaims.karpenter.sh")["spec is immutable"] == "self == oldSelf"
    assert "oldSelf.group" in rules("nodepools.karpenter.sh")["nodeClassRef.group is immutable"]


@pytest.mark.parametrize("name", ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh"])
def test_only_karpenters_label_domains_are_restricted(name: str) -> None:
    """Karpenter v1.15 restricts only karpenter.sh and karpenter.k8s.aws (core ``RestrictedLabelDomains`` plus the
    AWS provider's): no CEL rule names kubernetes.io or k8s.io any more, so node-role.kubernetes.io/* labels and
    requirements apply."""
    messages = set(rules(name))
    assert not {m for m in messages if 'kubernetes.io" is restricted' in m or 'k8s.io" is restricted' in m}
    assert {wk.GROUP, wk.AWS_GROUP} == wk.RESTRICTED_LABEL_DOMAINS


def test_nodeclaim_requirements_may_name_the_nodepool() -> None:
    """NodeClaims carry a karpenter.sh/nodepool requirement, so only the NodePool forbids that key."""
    np_key = schema_of("nodepools.karpenter.sh")["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    np_msgs = {
        v["message"]
        for v in np_key["properties"]["requirements"]["items"]["properties"]["key"]["x-kubernetes-validations"]
    }
    nc_key = schema_of("nodeclaims.karpenter.sh")["properties"]["spec"]["properties"]["requirements"]["items"]
    nc_msgs = {v["message"] for v in nc_key["properties"]["key"]["x-kubernetes-validations"]}
    assert 'label "karpenter.sh/nodepool" is restricted' in np_msgs - nc_msgs


def _allowed_in_rule(rule: str, domain: str) -> set[str]:
    return {k for k in re.findall(r'"([^"]+)"', rule) if k.startswith(f"{domain}/")}


@pytest.mark.parametrize("name", ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh"])
def test_well_known_aws_labels_are_allowed_requirement_keys(name: str) -> None:
    """Every karpenter.k8s.aws label karpy treats as well known is accepted as a requirement key."""
    rule = rules(name)['label domain "karpenter.k8s.aws" is restricted']
    known = {k for k in wk.WELL_KNOWN_LABELS if k.startswith(f"{wk.AWS_GROUP}/")}
    assert known - _allowed_in_rule(rule, wk.AWS_GROUP) == set()


# --- kustomize base --------------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_and_nothing_missing() -> None:
    """`kubectl apply -k manifests/` installs the five CRDs (first) and every top-level manifest."""
    kustomization = load_one(MANIFESTS / "kustomization.yaml")
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert [p for p in listed if not (MANIFESTS / p).is_file()] == []
    on_disk = {f"crds/{f.name}" for f in CRDS.glob("*.yaml")} | {
        f.name for f in MANIFESTS.glob("*.yaml") if f.name != "kustomization.yaml"
    }
    assert set(listed) == on_disk
    assert all(p.startswith("crds/") for p in listed[: len(ALL_CRDS)])
    assert {"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "deployment.yaml"} <= set(listed)


def test_namespaced_objects_live_in_the_karpy_namespace() -> None:
    """Everything namespaced goes to namespace karpy, which the base creates."""
    docs = all_manifest_docs()
    [ns] = by_kind(docs, "Namespace")
    assert ns["metadata"]["name"] == "karpy"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for d in docs:
        if d["kind"] not in cluster_scoped:
            assert d["metadata"].get("namespace") == "karpy", f"{d['kind']}/{d['metadata']['name']}"


# --- Deployment ------------------------------------------------------------------------------------------


def deployment() -> JSON:
    [dep] = by_kind(load(MANIFESTS / "deployment.yaml"), "Deployment")
    return dep


def container() -> JSON:
    c: JSON
    [c] = deployment()["spec"]["template"]["spec"]["containers"]
    return c


def env() -> dict[str, str]:
    return {e["name"]: e["value"] for e in container()["env"] if "value" in e}


def port_number(port: int | str) -> int:
    """A probe port, resolving a named container port."""
    if isinstance(port, int):
        return port
    [p] = [p for p in container()["ports"] if p["name"] == port]
    return int(p["containerPort"])


def test_deployment_runs_karpy_as_a_service_account_pod_with_two_replicas() -> None:
    """karpy:latest runs `karpy run` as ServiceAccount karpy, two replicas (leader election), system-cluster-critical.

    Karpenter v1.15's chart runs ``replicas: 2`` (values.yaml); karpy ran one unelected replica before it had
    leader election."""
    dep = deployment()
    assert (dep["metadata"]["name"], dep["metadata"]["namespace"]) == ("karpy", "karpy")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert (
        pod["serviceAccountName"]
        == by_kind(load(MANIFESTS / "serviceaccount.yaml"), "ServiceAccount")[0]["metadata"]["name"]
    )
    assert pod["priorityClassName"] == "system-cluster-critical"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    c = container()
    assert c["image"] == "karpy:latest"
    assert c["args"] == ["run"]
    assert "command" not in c  # the image's entrypoint is the `karpy` console script
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


def test_deployment_runs_non_root_read_only_without_capabilities() -> None:
    """Non-root uid 65532, read-only root filesystem, all capabilities dropped, RuntimeDefault seccomp."""
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container()["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


def test_rollout_and_placement_as_karpenters_chart() -> None:
    """A rolling update one pod at a time (the chart's strategy.rollingUpdate.maxUnavailable 1; Recreate was for one
    unelected replica), never two replicas on one node (required anti-affinity on the hostname), never on a node
    karpy manages (karpenter.sh/nodepool DoesNotExist), spread over zones (maxSkew 1, DoNotSchedule)."""
    dep = deployment()
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    labels = dep["spec"]["selector"]["matchLabels"]
    pod = dep["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}
    [anti] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}}
    assert pod["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels},
        }
    ]


def test_pod_disruption_budget_keeps_one_replica() -> None:
    """policy/v1 PodDisruptionBudget karpy, maxUnavailable 1 over the Deployment's pods (the chart's)."""
    [pdb] = by_kind(load(MANIFESTS / "poddisruptionbudget.yaml"), "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert (pdb["metadata"]["name"], pdb["metadata"]["namespace"]) == ("karpy", "karpy")
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": deployment()["spec"]["selector"]["matchLabels"]},
    }
    assert "poddisruptionbudget.yaml" in load_one(MANIFESTS / "kustomization.yaml")["resources"]


def test_leader_election_env() -> None:
    """Both replicas elect: DISABLE_LEADER_ELECTION unset, the Lease in the pod's own namespace (downward API),
    LEADER_ELECTION_NAME left at Karpenter's default, which the Role's resourceNames name."""
    variables = {e["name"]: e for e in container()["env"]}
    assert "DISABLE_LEADER_ELECTION" not in variables
    assert "LEADER_ELECTION_NAME" not in variables
    assert variables["LEADER_ELECTION_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert from_environment(env()).leader_election_name == "karpenter-leader-election"


def test_probes_and_ports_follow_the_settings() -> None:
    """Liveness /healthz and readiness /readyz hit HEALTH_PROBE_PORT; METRICS_PORT is the metrics port."""
    c = container()
    settings = env()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http-metrics": int(settings["METRICS_PORT"]), "http": int(settings["HEALTH_PROBE_PORT"])}
    for probe, path, delay in (("livenessProbe", "/healthz", 30), ("readinessProbe", "/readyz", 5)):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert port_number(get["port"]) == int(settings["HEALTH_PROBE_PORT"])
        # The chart's timings (templates/deployment.yaml).
        assert (c[probe]["initialDelaySeconds"], c[probe]["timeoutSeconds"]) == (delay, 30)


def test_deployment_env_is_valid_karpy_configuration() -> None:
    """The env vars use Karpenter's names and parse with karpy's own settings loader."""
    settings = env()
    for name in (
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "AWS_REGION",
        "INTERRUPTION_QUEUE",
        "BATCH_IDLE_DURATION",
        "BATCH_MAX_DURATION",
        "LOG_LEVEL",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "VM_MEMORY_OVERHEAD_PERCENT",
        "FEATURE_GATES",
    ):
        assert name in settings, name
    parsed = from_environment(settings)
    assert parsed.cluster_name == "my-cluster"
    assert (parsed.batch_idle_duration, parsed.batch_max_duration) == (1.0, 10.0)
    assert (parsed.metrics_port, parsed.health_probe_port) == (8080, 8081)
    assert parsed.vm_memory_overhead_percent == 0.075
    assert parsed.interruption_queue == ""


def test_metrics_service_targets_the_controller() -> None:
    """The metrics Service selects the controller pods and targets the http-metrics port."""
    [svc] = by_kind(load(MANIFESTS / "service.yaml"), "Service")
    assert svc["spec"]["selector"].items() <= deployment()["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http-metrics"]


# --- RBAC ------------------------------------------------------------------------------------------------


def grants(kind: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples granted by the RBAC objects of one kind."""
    out = set()
    for role in by_kind(load(MANIFESTS / "rbac.yaml"), kind):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out |= {(group, resource, verb) for verb in rule["verbs"]}
    return out


READ = ("get", "list", "watch")
REQUIRED_CLUSTER_GRANTS = (
    {("", r, v) for r in ("pods", "nodes", "persistentvolumes", "persistentvolumeclaims", "namespaces") for v in READ}
    | {("storage.k8s.io", r, v) for r in ("storageclasses", "csinodes") for v in READ}
    | {("apps", "daemonsets", v) for v in READ}
    | {("policy", "poddisruptionbudgets", v) for v in READ}
    | {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in READ}
    | {("", "pods/binding", "create"), ("", "pods/eviction", "create"), ("", "pods", "delete")}
    | {("", "nodes", v) for v in ("create", "patch", "update", "delete")}
    | {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")}
    | {("karpenter.sh", "nodeclaims", v) for v in (*READ, "create", "patch", "update", "delete")}
    | {("karpenter.sh", "nodepools", v) for v in (*READ, "patch", "update")}
    | {("karpenter.sh", r, v) for r in ("nodepools/status", "nodeclaims/status") for v in ("get", "patch", "update")}
    | {("karpenter.k8s.aws", "ec2nodeclasses", v) for v in (*READ, "patch", "update")}
    | {("karpenter.k8s.aws", "ec2nodeclasses/status", v) for v in ("get", "patch", "update")}
    | {
        (g, f"{r}/finalizers", "update")
        for g, r in (
            ("karpenter.sh", "nodepools"),
            ("karpenter.sh", "nodeclaims"),
            ("karpenter.k8s.aws", "ec2nodeclasses"),
        )
    }
)


def test_cluster_role_grants_what_the_controllers_use() -> None:
    """Reads for cluster state, writes for NodeClaims, nodes, bindings, evictions, events and statuses."""
    assert REQUIRED_CLUSTER_GRANTS - grants("ClusterRole") == set()


def test_rbac_is_least_privilege() -> None:
    """No wildcards, no secrets or configmaps, no write access to users' NodePools beyond metadata/status."""
    granted = grants("ClusterRole") | grants("Role")
    assert not [g for g in granted if "*" in g]
    assert not [g for g in granted if g[1] in ("secrets", "configmaps", "serviceaccounts", "roles", "clusterroles")]
    assert ("karpenter.sh", "nodepools", "create") not in granted
    assert ("karpenter.sh", "nodepools", "delete") not in granted
    assert ("karpenter.k8s.aws", "ec2nodeclasses", "delete") not in granted
    assert not [g for g in grants("ClusterRole") if g[0] == "coordination.k8s.io"]


def test_leader_election_leases_only_in_the_karpy_namespace() -> None:
    """Leases come from a namespaced Role in karpy, bound to the ServiceAccount."""
    [role] = by_kind(load(MANIFESTS / "rbac.yaml"), "Role")
    assert role["metadata"]["namespace"] == "karpy"
    assert {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")} <= grants("Role")


def test_lease_role_is_karpenters() -> None:
    """Exactly the rules of Karpenter's chart (templates/role.yaml): get/watch any Lease, patch/update only the
    election Lease, create (no resourceNames possible). Before leader election karpy's Role granted every Lease verb
    (list, delete, writes on any Lease); the expectation now is Karpenter's narrower Role."""
    [role] = by_kind(load(MANIFESTS / "rbac.yaml"), "Role")
    lease = ["coordination.k8s.io"], ["leases"]
    assert [(r["apiGroups"], r["resources"], r["verbs"], r.get("resourceNames")) for r in role["rules"]] == [
        (*lease, ["get", "watch"], None),
        (*lease, ["patch", "update"], ["karpenter-leader-election"]),
        (*lease, ["create"], None),
    ]


def test_bindings_reference_the_roles_and_service_account() -> None:
    """Each binding binds its same-named role to ServiceAccount karpy/karpy."""
    docs = load(MANIFESTS / "rbac.yaml")
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        [binding] = by_kind(docs, binding_kind)
        [role] = by_kind(docs, role_kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "karpy", "namespace": "karpy"}]


def test_every_resource_karpy_talks_to_has_a_grant() -> None:
    """Each API resource in karpy.kube.resources is covered by some rule (Deployments are only used by tests)."""
    granted = {(g, r) for g, r, _ in grants("ClusterRole") | grants("Role")}
    known = [v for v in vars(kube_resources).values() if isinstance(v, kube_resources.Resource)]
    missing = [(r.group, r.plural) for r in known if r.kind != "Deployment" and (r.group, r.plural) not in granted]
    assert missing == []


# --- examples --------------------------------------------------------------------------------------------

SCHEMAS = {
    ("karpenter.sh/v1", "NodePool"): "nodepools.karpenter.sh",
    ("karpenter.sh/v1", "NodeClaim"): "nodeclaims.karpenter.sh",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "ec2nodeclasses.karpenter.k8s.aws",
}
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def example_docs() -> list[JSON]:
    return [d for f in EXAMPLE_FILES for d in load(f)]


def test_the_documented_examples_exist() -> None:
    """The Karpenter-style examples the README points to."""
    names = {f.name for f in EXAMPLE_FILES}
    assert {"nodepool-default.yaml", "inflate.yaml", "spot.yaml", "gpu-nodepool.yaml", "multiple-arch.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_validates_against_the_crds(path: Path) -> None:
    """Every Karpenter object in an example passes the CRD's OpenAPI schema (types, enums, patterns, unknown fields)."""
    docs = load(path)
    assert docs
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc)
        key = (doc["apiVersion"], doc["kind"])
        if key in SCHEMAS:
            assert validate(doc, schema_of(SCHEMAS[key])) == [], f"{path.name}: {doc['kind']}/{doc['metadata']['name']}"


def test_validator_rejects_what_the_apiserver_rejects() -> None:
    """The schema check above can fail: typos, bad enums and unknown fields are caught."""
    [nodepool] = by_kind(load(EXAMPLES / "nodepool-default.yaml"), "NodePool")
    schema = schema_of("nodepools.karpenter.sh")
    bad_policy = {
        **nodepool,
        "spec": {
            **nodepool["spec"],
            "disruption": {"consolidateAfter": "30s", "consolidationPolicy": "WhenUnderutilized"},
        },
    }
    unknown = {**nodepool, "spec": {**nodepool["spec"], "ttlSecondsAfterEmpty": 30}}
    bad_duration = {**nodepool, "spec": {**nodepool["spec"], "disruption": {"consolidateAfter": "30 seconds"}}}
    no_template = {**nodepool, "spec": {"limits": {"cpu": 10}}}
    for obj in (bad_policy, unknown, bad_duration, no_template):
        assert validate(obj, schema) != []


def test_default_example_is_the_getting_started_pair() -> None:
    """NodePool default (on-demand, amd64, c/m/r, generation > 2, 1000 cpu) on EC2NodeClass default (al2023@latest)."""
    docs = load(EXAMPLES / "nodepool-default.yaml")
    [nodepool] = by_kind(docs, "NodePool")
    [nodeclass] = by_kind(docs, "EC2NodeClass")
    assert nodepool["metadata"]["name"] == nodeclass["metadata"]["name"] == "default"
    reqs = {r["key"]: (r["operator"], r.get("values")) for r in nodepool["spec"]["template"]["spec"]["requirements"]}
    assert reqs[wk.LABEL_CAPACITY_TYPE] == ("In", ["on-demand"])
    assert reqs[wk.LABEL_ARCH] == ("In", ["amd64"])
    assert reqs[wk.LABEL_INSTANCE_CATEGORY] == ("In", ["c", "m", "r"])
    assert reqs[wk.LABEL_INSTANCE_GENERATION] == ("Gt", ["2"])
    assert nodepool["spec"]["limits"] == {"cpu": 1000}
    assert nodepool["spec"]["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "30s",
    }
    assert nodeclass["spec"]["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert nodeclass["spec"]["role"] == "KarpenterNodeRole-karpy-demo"
    for terms in ("subnetSelectorTerms", "securityGroupSelectorTerms"):
        assert nodeclass["spec"][terms] == [{"tags": {"karpenter.sh/discovery": "karpy-demo"}}]


def test_example_nodepools_reference_an_example_nodeclass() -> None:
    """Every example NodePool points at an EC2NodeClass the examples define."""
    docs = example_docs()
    classes = {d["metadata"]["name"] for d in by_kind(docs, "EC2NodeClass")}
    for nodepool in by_kind(docs, "NodePool"):
        ref = nodepool["spec"]["template"]["spec"]["nodeClassRef"]
        assert (ref["group"], ref["kind"]) == ("karpenter.k8s.aws", "EC2NodeClass")
        assert ref["name"] in classes


def test_example_workloads_start_at_zero_replicas() -> None:
    """Applying an example never launches capacity by itself: workloads are scaled up on purpose."""
    deployments = by_kind(example_docs(), "Deployment")
    assert {d["metadata"]["name"] for d in deployments} >= {"inflate", "gpu-inflate", "inflate-amd64", "inflate-arm64"}
    assert [d["metadata"]["name"] for d in deployments if d["spec"]["replicas"] != 0] == []
    [inflate] = by_kind(load(EXAMPLES / "inflate.yaml"), "Deployment")
    [c] = inflate["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "public.ecr.aws/eks-distro/kubernetes/pause:3.7"
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "1.5Gi"}


def test_gpu_workload_tolerates_the_gpu_nodepool_taint() -> None:
    """The GPU workload requests a GPU and tolerates the GPU NodePool's taint."""
    docs = load(EXAMPLES / "gpu-nodepool.yaml")
    [nodepool] = by_kind(docs, "NodePool")
    [workload] = by_kind(docs, "Deployment")
    taints = {t["key"] for t in nodepool["spec"]["template"]["spec"]["taints"]}
    pod = workload["spec"]["template"]["spec"]
    assert taints <= {t["key"] for t in pod["tolerations"]}
    assert pod["containers"][0]["resources"]["limits"][wk.RESOURCE_NVIDIA_GPU] == 1
