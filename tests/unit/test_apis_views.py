"""Typed views of NodePool, NodeClaim and EC2NodeClass (karpy.apis), built from real-shaped manifests.

The manifests follow Karpenter's own examples (``examples/v1/max-node-lifetime.yaml`` and the e2e
``test/pkg/environment/aws/default_nodepool.yaml`` of the AWS provider) and karpy's getting-started example;
defaults are the ones the CRDs apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, set_condition
from karpy.apis.ec2nodeclass import AMI, EC2NodeClass, SecurityGroup, Subnet
from karpy.apis.nodeclaim import NodeClaim, NodeClassRef, NodeSelectorRequirement
from karpy.apis.nodepool import DEFAULT_BUDGETS, WHEN_EMPTY, Budget, NodePool
from karpy.apis.taints import Taint
from karpy.apis.times import parse_time
from karpy.state.cluster import ClusterState
from karpy.state.views import node_info

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
T0 = "2026-11-24T12:00:00Z"

MAX_NODE_LIFETIME = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  uid: 1c3e8a52-0a4e-4d6f-9a39-3c0c6a1f0a11
  generation: 3
  resourceVersion: "4711"
  creationTimestamp: "2026-11-24T12:00:00Z"
  labels: {team: platform}
  annotations: {karpenter.sh/nodepool-hash: "123", karpenter.sh/nodepool-hash-version: v3}
spec:
  template:
    metadata:
      labels: {billing: team-a}
      annotations: {example.com/owner: platform}
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: karpenter.k8s.aws/instance-family
          operator: Exists
          minValues: 5
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      taints:
        - key: example.com/special
          value: "true"
          effect: NoSchedule
      startupTaints:
        - key: example.com/agent-not-ready
          effect: NoExecute
      expireAfter: 168h
      terminationGracePeriod: 24h
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 60s
    budgets:
      - nodes: "20%"
        reasons: [Empty, Drifted]
      - nodes: "0"
        schedule: "@daily"
        duration: 10m
  limits:
    cpu: 1000
    memory: 1000Gi
  weight: 50
status:
  resources: {cpu: "4", memory: 16Gi, nodes: "2"}
  nodes: 2
  conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2026-11-24T12:00:00Z"
      observedGeneration: 3
"""

E2E_DEFAULT_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      expireAfter: Never
      requirements:
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
        - key: karpenter.k8s.aws/instance-category
          operator: NotIn
          values: ["a", "t"]
  disruption:
    consolidateAfter: Never
    budgets:
      - nodes: 100%
  limits:
    cpu: 1000
"""

NODECLAIM = """
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  uid: 5d0c2e3b-7f3a-4b8e-8d1d-2a6b1e9c0f22
  generation: 1
  resourceVersion: "812"
  creationTimestamp: "2026-11-24T12:00:00Z"
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: m5.large
  annotations:
    karpy.sh/planned-pods: '["default/inflate-1"]'
  finalizers: [karpenter.sh/termination]
  ownerReferences:
    - {apiVersion: karpenter.sh/v1, kind: NodePool, name: default, uid: 1c3e8a52, blockOwnerDeletion: true}
spec:
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: ["m5.large", "m5.xlarge"]
    - key: karpenter.sh/capacity-type
      operator: In
      values: ["on-demand"]
  resources:
    requests: {cpu: 2100m, memory: 1Gi, pods: "3"}
  nodeClassRef:
    group: karpenter.k8s.aws
    kind: EC2NodeClass
    name: default
  startupTaints:
    - key: example.com/agent-not-ready
      effect: NoExecute
  terminationGracePeriod: 1h
status:
  providerID: aws:///us-east-1a/i-0123456789abcdef0
  nodeName: ip-10-0-1-23.ec2.internal
  imageID: ami-0abc
  capacity: {cpu: "2", memory: 7910Mi, pods: "29", ephemeral-storage: 20Gi}
  allocatable: {cpu: 1930m, memory: 7220Mi, pods: "29", ephemeral-storage: 17Gi}
  conditions:
    - {type: Launched, status: "True", reason: Launched, message: "", lastTransitionTime: "2026-11-24T12:00:10Z"}
    - {type: Registered, status: "True", reason: Registered, message: "", lastTransitionTime: "2026-11-24T12:01:00Z"}
    - {type: Initialized, status: "False", reason: NotInitialized, message: "node not ready",
       lastTransitionTime: "2026-11-24T12:01:00Z", observedGeneration: 1}
"""

EC2NODECLASS_STATUS = """
status:
  subnets:
    - {id: subnet-0a, zone: us-east-1a, zoneID: use1-az1}
    - {id: subnet-0b, zone: us-east-1b, zoneID: use1-az2}
  securityGroups:
    - {id: sg-0a, name: eks-cluster-sg}
  amis:
    - id: ami-0abc
      name: amazon-eks-node-al2023-x86_64-standard-1.33-v20261101
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
    - id: ami-0def
      name: amazon-eks-node-al2023-arm64-standard-1.33-v20261101
      deprecated: true
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [arm64]}
  instanceProfile: karpy-demo_1234567890
  conditions:
    - {type: Ready, status: "False", reason: SubnetsNotFound, message: "no subnet matched",
       lastTransitionTime: "2026-11-24T12:00:00Z"}
"""


def load(text: str) -> dict[str, Any]:
    obj = yaml.safe_load(text)
    assert isinstance(obj, dict)
    return obj


def example(kind: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / "nodepool-default.yaml").read_text()))
    return next(d for d in docs if d["kind"] == kind)


def test_nodepool_view_reads_every_field_the_controllers_use() -> None:
    obj = load(MAX_NODE_LIFETIME)
    pool = NodePool.from_json(obj)
    assert (pool.name, pool.meta.uid, pool.meta.generation, pool.meta.resource_version) == (
        "default",
        "1c3e8a52-0a4e-4d6f-9a39-3c0c6a1f0a11",
        3,
        "4711",
    )
    assert pool.meta.creation_timestamp == parse_time(T0) and not pool.deleting
    assert pool.meta.labels == {"team": "platform"}
    assert pool.meta.annotations[wk.ANNOTATION_NODEPOOL_HASH_VERSION] == "v3"
    template = pool.template
    assert template.labels == {"billing": "team-a"} and template.annotations == {"example.com/owner": "platform"}
    assert template.requirements == (
        NodeSelectorRequirement(wk.LABEL_ARCH, "In", ("amd64",)),
        NodeSelectorRequirement("karpenter.k8s.aws/instance-family", "Exists", (), 5),
    )
    assert template.node_class_ref == NodeClassRef(wk.AWS_GROUP, "EC2NodeClass", "default")
    assert template.node_class_ref.ec2nodeclass
    assert template.taints == (Taint("example.com/special", "NoSchedule", "true"),)
    assert template.startup_taints == (Taint("example.com/agent-not-ready", "NoExecute"),)
    assert (template.expire_after, template.termination_grace_period) == ("168h", "24h")
    assert pool.disruption.consolidation_policy == WHEN_EMPTY
    assert pool.disruption.consolidate_after == "60s"
    assert pool.disruption.budgets == (
        Budget(nodes="20%", reasons=("Empty", "Drifted")),
        Budget(nodes="0", schedule="@daily", duration="10m"),
    )
    assert pool.limits == {"cpu": "1000", "memory": "1000Gi"}, "as written, quantities as strings"
    assert pool.weight == 50
    assert pool.resources == {"cpu": "4", "memory": "16Gi", "nodes": "2"} and pool.nodes == 2
    ready = pool.condition(wk.COND_READY)
    assert ready == Condition("Ready", "True", "Ready", "", parse_time(T0), 3)
    assert pool.is_true(wk.COND_READY) and not pool.is_true(wk.COND_VALIDATION_SUCCEEDED)
    assert pool.raw is obj, "the JSON is kept, not copied, for writes"


def test_nodepool_view_applies_the_crd_defaults() -> None:
    """What the apiserver stores for a NodePool written without them (karpenter.sh_nodepools.yaml defaults)."""
    pool = NodePool.from_json(example("NodePool"))
    assert pool.template.expire_after == "720h"
    assert pool.template.termination_grace_period == "", "no default: pods get their own grace period"
    assert pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert pool.disruption.consolidate_after == "30s"
    assert pool.disruption.budgets == DEFAULT_BUDGETS == (Budget(nodes="10%"),)
    assert pool.weight == 0 and pool.nodes is None and pool.conditions == ()
    assert pool.meta.generation is None, "no generation: conditions carry no observedGeneration"
    bare = NodePool.from_json({"metadata": {"name": "bare"}, "spec": {"template": {"spec": {}}}})
    assert bare.disruption.consolidate_after == "0s" and bare.disruption.budgets == DEFAULT_BUDGETS
    assert bare.template.node_class_ref == NodeClassRef() and not bare.template.node_class_ref.ec2nodeclass


def test_nodepool_view_keeps_never_and_empty_budget_lists() -> None:
    pool = NodePool.from_json(load(E2E_DEFAULT_NODEPOOL))
    assert pool.template.expire_after == "Never" and pool.disruption.consolidate_after == "Never"
    assert pool.disruption.budgets == (Budget(nodes="100%"),)
    assert pool.template.requirements[1] == NodeSelectorRequirement(
        "karpenter.k8s.aws/instance-category", "NotIn", ("a", "t")
    )
    empty = NodePool.from_json({"metadata": {"name": "x"}, "spec": {"disruption": {"budgets": []}}})
    assert empty.disruption.budgets == DEFAULT_BUDGETS, "no budget at all is the default 10%"


def test_nodeclaim_view_reads_spec_and_status_in_canonical_units() -> None:
    obj = load(NODECLAIM)
    claim = NodeClaim.from_json(obj)
    assert claim.name == "default-x7k2p" and claim.nodepool == "default"
    assert claim.meta.finalizers == (wk.FINALIZER_TERMINATION,)
    assert claim.requirements[0] == NodeSelectorRequirement(wk.LABEL_INSTANCE_TYPE, "In", ("m5.large", "m5.xlarge"))
    assert claim.requests == {"cpu": 2100, "memory": 1024**3, "pods": 3}
    assert claim.startup_taints == (Taint("example.com/agent-not-ready", "NoExecute"),) and claim.taints == ()
    assert claim.node_class_ref.name == "default"
    assert claim.expire_after == "720h", "a NodeClaim written without expireAfter gets the CRD default"
    assert claim.termination_grace_period == "1h"
    assert claim.provider_id == "aws:///us-east-1a/i-0123456789abcdef0"
    assert claim.node_name == "ip-10-0-1-23.ec2.internal" and claim.image_id == "ami-0abc"
    assert claim.capacity == {"cpu": 2000, "memory": 7910 * 1024**2, "pods": 29, "ephemeral-storage": 20 * 1024**3}
    assert claim.allocatable["cpu"] == 1930
    assert claim.is_true(wk.COND_LAUNCHED) and claim.is_true(wk.COND_REGISTERED)
    assert not claim.is_true(wk.COND_INITIALIZED) and claim.condition(wk.COND_DRIFTED) is None
    registered = claim.condition(wk.COND_REGISTERED)
    assert registered is not None and registered.last_transition_time == parse_time("2026-11-24T12:01:00Z")
    initialized = claim.condition(wk.COND_INITIALIZED)
    assert initialized is not None and (initialized.reason, initialized.observed_generation) == ("NotInitialized", 1)


def test_a_view_never_raises_on_odd_values() -> None:
    """The watch stream must not stop on one object: odd values read as empty (invalid quantities as {})."""
    claim = NodeClaim.from_json(
        {
            "metadata": {"name": "odd", "labels": None, "deletionTimestamp": "not a time", "generation": "7"},
            "spec": {"requirements": [{"key": "k", "operator": "Exists", "minValues": "x"}, "junk"]},
            "status": {"capacity": {"cpu": "lots"}, "conditions": [{"type": "Launched", "lastTransitionTime": 5}]},
        }
    )
    assert claim.deleting, "a deletionTimestamp that does not parse still means deleting"
    assert claim.meta.generation is None and claim.meta.labels == {}
    assert claim.requirements == (NodeSelectorRequirement("k", "Exists", (), 0),)
    assert claim.capacity == {}
    assert claim.condition(wk.COND_LAUNCHED) == Condition("Launched", "")


def test_ec2nodeclass_view_reads_the_resolved_status() -> None:
    obj = {**example("EC2NodeClass"), **load(EC2NODECLASS_STATUS)}
    nodeclass = EC2NodeClass.from_json(obj)
    assert nodeclass.name == "default" and nodeclass.role == "KarpenterNodeRole-karpy-demo"
    assert nodeclass.instance_profile == "" and nodeclass.ami_family == "" and nodeclass.kubelet == {}
    assert nodeclass.subnets == (
        Subnet("subnet-0a", "us-east-1a", "use1-az1"),
        Subnet("subnet-0b", "us-east-1b", "use1-az2"),
    )
    assert nodeclass.security_groups == (SecurityGroup("sg-0a", "eks-cluster-sg"),)
    assert [a.id for a in nodeclass.amis] == ["ami-0abc", "ami-0def"]
    assert nodeclass.amis[1] == AMI(
        "ami-0def",
        "amazon-eks-node-al2023-arm64-standard-1.33-v20261101",
        True,
        ({"key": wk.LABEL_ARCH, "operator": "In", "values": ["arm64"]},),
    )
    assert nodeclass.status_instance_profile == "karpy-demo_1234567890"
    ready = nodeclass.condition(wk.COND_READY)
    assert ready is not None and (ready.status, ready.reason) == ("False", "SubnetsNotFound")
    assert nodeclass.status is obj["status"]


def test_cluster_state_builds_each_view_once_when_it_stores_the_object() -> None:
    """The views are built when the object is stored (not per read) and go with it; the JSON maps stay."""
    state = ClusterState()
    pool_json = load(MAX_NODE_LIFETIME)
    state.apply("NodePool", "ADDED", pool_json)
    state.apply("NodeClaim", "ADDED", load(NODECLAIM))
    state.apply("EC2NodeClass", "ADDED", {**example("EC2NodeClass"), "metadata": {"name": "default", "uid": "u1"}})
    view = state.nodepool_view("default")
    assert view is not None and view is state.nodepool_view("default"), "one view per stored version"
    assert state.nodepools["default"] is pool_json and view.raw is pool_json
    claim = state.nodeclaim_view("default-x7k2p")
    assert claim is not None and state.nodeclaim_views_of("default") == [claim]
    node = node_info({"metadata": {"name": "n"}, "spec": {"providerID": claim.provider_id}})
    assert state.nodeclaim_view_for_node(node) is claim, "joined by providerID, as the JSON index"
    assert state.nodeclass_view("default") is not None
    newer = load(NODECLAIM)
    newer["metadata"]["resourceVersion"] = "813"
    newer["status"]["conditions"] = set_condition(newer["status"]["conditions"], wk.COND_INITIALIZED, "True", "Ready")
    state.apply("NodeClaim", "MODIFIED", newer)
    updated = state.nodeclaim_view("default-x7k2p")
    assert updated is not None and updated is not claim and updated.is_true(wk.COND_INITIALIZED)
    stale = load(NODECLAIM)
    stale["metadata"]["resourceVersion"] = "800"
    state.apply("NodeClaim", "MODIFIED", stale)
    assert state.nodeclaim_view("default-x7k2p") is updated, "a stale event rebuilds nothing"
    state.apply("NodeClaim", "DELETED", newer)
    state.apply("NodePool", "DELETED", pool_json)
    assert state.nodeclaim_view("default-x7k2p") is None and state.nodepool_view("default") is None
    assert state.nodeclaim_views == {} and "default" not in state.nodepools
