"""Well-known names of the Karpenter v1 API (core ``karpenter.sh`` and AWS ``karpenter.k8s.aws``).

Source: Karpenter core ``pkg/apis/v1/labels.go``, ``taints.go`` and the AWS provider's
``pkg/apis/v1/labels.go``. These strings are the compatibility contract with Karpenter users'
manifests, so they are spelled exactly as upstream spells them.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "karpenter.sh"
AWS_GROUP: Final = "karpenter.k8s.aws"
VERSION: Final = "v1"

# Kubernetes well-known labels.
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_OS: Final = "kubernetes.io/os"
LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_WINDOWS_BUILD: Final = "node.kubernetes.io/windows-build"
LABEL_EXCLUDE_FROM_LB: Final = "node.kubernetes.io/exclude-from-external-load-balancers"

# Karpenter core labels.
LABEL_NODEPOOL: Final = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
LABEL_REGISTERED: Final = "karpenter.sh/registered"
LABEL_INITIALIZED: Final = "karpenter.sh/initialized"
LABEL_DO_NOT_SYNC_TAINTS: Final = "karpenter.sh/do-not-sync-taints"

CAPACITY_TYPE_ON_DEMAND: Final = "on-demand"
CAPACITY_TYPE_SPOT: Final = "spot"
CAPACITY_TYPE_RESERVED: Final = "reserved"

# AWS provider labels.
LABEL_EC2NODECLASS: Final = "karpenter.k8s.aws/ec2nodeclass"
LABEL_ZONE_ID: Final = "topology.k8s.aws/zone-id"
LABEL_INSTANCE_CATEGORY: Final = "karpenter.k8s.aws/instance-category"
LABEL_INSTANCE_FAMILY: Final = "karpenter.k8s.aws/instance-family"
LABEL_INSTANCE_GENERATION: Final = "karpenter.k8s.aws/instance-generation"
LABEL_INSTANCE_SIZE: Final = "karpenter.k8s.aws/instance-size"
LABEL_INSTANCE_CPU: Final = "karpenter.k8s.aws/instance-cpu"
LABEL_INSTANCE_CPU_MANUFACTURER: Final = "karpenter.k8s.aws/instance-cpu-manufacturer"
LABEL_INSTANCE_CPU_SUSTAINED_CLOCK: Final = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz"
LABEL_INSTANCE_MEMORY: Final = "karpenter.k8s.aws/instance-memory"
LABEL_INSTANCE_EBS_BANDWIDTH: Final = "karpenter.k8s.aws/instance-ebs-bandwidth"
LABEL_INSTANCE_NETWORK_BANDWIDTH: Final = "karpenter.k8s.aws/instance-network-bandwidth"
LABEL_INSTANCE_LOCAL_NVME: Final = "karpenter.k8s.aws/instance-local-nvme"
LABEL_INSTANCE_HYPERVISOR: Final = "karpenter.k8s.aws/instance-hypervisor"
LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: Final = "karpenter.k8s.aws/instance-encryption-in-transit-supported"
LABEL_INSTANCE_GPU_NAME: Final = "karpenter.k8s.aws/instance-gpu-name"
LABEL_INSTANCE_GPU_MANUFACTURER: Final = "karpenter.k8s.aws/instance-gpu-manufacturer"
LABEL_INSTANCE_GPU_COUNT: Final = "karpenter.k8s.aws/instance-gpu-count"
LABEL_INSTANCE_GPU_MEMORY: Final = "karpenter.k8s.aws/instance-gpu-memory"
LABEL_INSTANCE_ACCELERATOR_NAME: Final = "karpenter.k8s.aws/instance-accelerator-name"
LABEL_INSTANCE_ACCELERATOR_MANUFACTURER: Final = "karpenter.k8s.aws/instance-accelerator-manufacturer"
LABEL_INSTANCE_ACCELERATOR_COUNT: Final = "karpenter.k8s.aws/instance-accelerator-count"
LABEL_INSTANCE_TENANCY: Final = "karpenter.k8s.aws/instance-tenancy"
LABEL_INSTANCE_CAPABILITY_FLEX: Final = "karpenter.k8s.aws/instance-capability-flex"
LABEL_CAPACITY_RESERVATION_ID: Final = "karpenter.k8s.aws/capacity-reservation-id"
LABEL_CAPACITY_RESERVATION_TYPE: Final = "karpenter.k8s.aws/capacity-reservation-type"
LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: Final = "karpenter.k8s.aws/capacity-reservation-interruptible"
LABEL_PLACEMENT_GROUP_ID: Final = "karpenter.k8s.aws/placement-group-id"
LABEL_PLACEMENT_GROUP_PARTITION: Final = "karpenter.k8s.aws/placement-group-partition"

# Labels a NodePool or pod may select on even though no single node carries them yet
# (Karpenter: WellKnownLabels). A requirement on an unknown key with operator In makes the key a
# custom label that the NodeClaim must carry.
WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_CAPACITY_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_INSTANCE_TYPE,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_WINDOWS_BUILD,
        LABEL_EC2NODECLASS,
        LABEL_ZONE_ID,
        LABEL_INSTANCE_CATEGORY,
        LABEL_INSTANCE_FAMILY,
        LABEL_INSTANCE_GENERATION,
        LABEL_INSTANCE_SIZE,
        LABEL_INSTANCE_CPU,
        LABEL_INSTANCE_CPU_MANUFACTURER,
        LABEL_INSTANCE_CPU_SUSTAINED_CLOCK,
        LABEL_INSTANCE_MEMORY,
        LABEL_INSTANCE_EBS_BANDWIDTH,
        LABEL_INSTANCE_NETWORK_BANDWIDTH,
        LABEL_INSTANCE_LOCAL_NVME,
        LABEL_INSTANCE_HYPERVISOR,
        LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT,
        LABEL_INSTANCE_GPU_NAME,
        LABEL_INSTANCE_GPU_MANUFACTURER,
        LABEL_INSTANCE_GPU_COUNT,
        LABEL_INSTANCE_GPU_MEMORY,
        LABEL_INSTANCE_ACCELERATOR_NAME,
        LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        LABEL_INSTANCE_ACCELERATOR_COUNT,
        LABEL_INSTANCE_TENANCY,
        LABEL_PLACEMENT_GROUP_ID,
        LABEL_CAPACITY_RESERVATION_ID,
        LABEL_CAPACITY_RESERVATION_TYPE,
        LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    }
)

# Well-known labels of Karpenter v1.15 that karpy's instance types and offerings do not carry yet (placement-group
# partitions, flex instances): NodePools and NodeClaims may name them
# (the CRDs' label-domain rules allow them, :func:`restricted_label_error` too), but the scheduler does not treat
# them as well known, so a requirement on them is not silently unsatisfiable.
NOT_YET_WELL_KNOWN_LABELS: Final = frozenset(
    {
        LABEL_INSTANCE_CAPABILITY_FLEX,
        LABEL_PLACEMENT_GROUP_PARTITION,
    }
)

# Label domains a NodePool may not set (Karpenter v1.15: core ``RestrictedLabelDomains`` = karpenter.sh, plus the
# AWS provider's karpenter.k8s.aws), except their well-known labels. Since v1.15 kubernetes.io and k8s.io are no
# longer restricted: a template may set node-role.kubernetes.io/* and other kubernetes.io labels.
RESTRICTED_LABEL_DOMAINS: Final = frozenset({GROUP, AWS_GROUP})
# Single labels a NodePool may not use (Karpenter: RestrictedLabels).
RESTRICTED_LABELS: Final = frozenset({LABEL_HOSTNAME})


def label_domain(key: str) -> str:
    """The domain (prefix) of a label key, ``""`` when it has none (Karpenter ``GetLabelDomain``)."""
    return key.split("/", 1)[0] if "/" in key else ""


def in_restricted_label_domain(key: str) -> bool:
    """``key``'s domain is one of :data:`RESTRICTED_LABEL_DOMAINS` or a subdomain of one."""
    domain = label_domain(key)
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)


def restricted_label_error(key: str) -> str:
    """Why a NodePool may not use the label ``key`` in its template labels or requirements; ``""`` when it may.

    Karpenter v1.15 core ``pkg/apis/v1/labels.go`` ``IsRestrictedLabel``: a well-known label is always allowed; a
    key in a restricted domain (or a subdomain of one) and ``kubernetes.io/hostname`` are not. The CRDs' CEL
    rules enforce the same at admission; this is the check for objects read without an apiserver.
    """
    if key in WELL_KNOWN_LABELS or key in NOT_YET_WELL_KNOWN_LABELS:
        return ""
    if in_restricted_label_domain(key) or key in RESTRICTED_LABELS:
        return (
            f"label {key} is restricted: use a well-known label or a custom label outside the restricted "
            f"domains {sorted(RESTRICTED_LABEL_DOMAINS)}"
        )
    return ""


# Legacy keys normalised to their current names (Karpenter: NormalizedLabels).
NORMALIZED_LABELS: Final = {
    "failure-domain.beta.kubernetes.io/zone": LABEL_ZONE,
    "failure-domain.beta.kubernetes.io/region": LABEL_REGION,
    "beta.kubernetes.io/arch": LABEL_ARCH,
    "beta.kubernetes.io/os": LABEL_OS,
    "beta.kubernetes.io/instance-type": LABEL_INSTANCE_TYPE,
}

# Annotations.
ANNOTATION_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
ANNOTATION_DO_NOT_REPAIR: Final = "karpenter.sh/do-not-repair"
ANNOTATION_NODEPOOL_HASH: Final = "karpenter.sh/nodepool-hash"
ANNOTATION_NODEPOOL_HASH_VERSION: Final = "karpenter.sh/nodepool-hash-version"
NODEPOOL_HASH_VERSION: Final = "v3"
ANNOTATION_NODECLASS_HASH: Final = "karpenter.k8s.aws/ec2nodeclass-hash"
ANNOTATION_NODECLASS_HASH_VERSION: Final = "karpenter.k8s.aws/ec2nodeclass-hash-version"
NODECLASS_HASH_VERSION: Final = "v6"
ANNOTATION_TERMINATION_TIMESTAMP: Final = "karpenter.sh/nodeclaim-termination-timestamp"
ANNOTATION_MIN_VALUES_RELAXED: Final = "karpenter.sh/nodeclaim-min-values-relaxed"
ANNOTATION_INSTANCE_PROFILE: Final = "karpenter.k8s.aws/instance-profile-name"
ANNOTATION_TAGGED: Final = "karpenter.k8s.aws/tagged"
# karpy's own: the pods the provisioner planned onto a NodeClaim (JSON list of "namespace/name"),
# so the binder survives a restart between NodeClaim creation and Node registration.
ANNOTATION_PLANNED_PODS: Final = "karpy.sh/planned-pods"
# karpy's own: the same plan keyed by pod uid, with the provisioning decision (batch) that made it
# (JSON {"batch": id, "pods": {uid: "namespace/name"}}); see karpy.state.plans.
ANNOTATION_PLAN: Final = "karpy.sh/plan"
# karpy's own: why a NodeClaim was created (JSON: pods, instance types, cheapest price, nodepool).
ANNOTATION_DECISION: Final = "karpy.sh/provisioning-decision"

# Taints.
TAINT_DISRUPTED_KEY: Final = "karpenter.sh/disrupted"
TAINT_UNREGISTERED_KEY: Final = "karpenter.sh/unregistered"

# Finalizers.
FINALIZER_TERMINATION: Final = "karpenter.sh/termination"
FINALIZER_NODECLASS_TERMINATION: Final = "karpenter.k8s.aws/termination"

# EC2 tags.
TAG_NODEPOOL: Final = "karpenter.sh/nodepool"
TAG_NODECLAIM: Final = "karpenter.sh/nodeclaim"
TAG_NODECLASS: Final = "karpenter.k8s.aws/ec2nodeclass"
TAG_EKS_CLUSTER_NAME: Final = "eks:eks-cluster-name"
TAG_NAME: Final = "Name"


def cluster_tag(cluster_name: str) -> str:
    """The tag key EC2 resources of a cluster carry (value ``owned``), as the AWS cloud provider uses it."""
    return f"kubernetes.io/cluster/{cluster_name}"


# Condition types.
COND_READY: Final = "Ready"
COND_LAUNCHED: Final = "Launched"
COND_REGISTERED: Final = "Registered"
COND_INITIALIZED: Final = "Initialized"
COND_CONSOLIDATABLE: Final = "Consolidatable"
COND_DRIFTED: Final = "Drifted"
COND_DRAINED: Final = "Drained"
COND_INSTANCE_TERMINATING: Final = "InstanceTerminating"
COND_DISRUPTION_REASON: Final = "DisruptionReason"
COND_VALIDATION_SUCCEEDED: Final = "ValidationSucceeded"
COND_NODECLASS_READY: Final = "NodeClassReady"
COND_NODE_REGISTRATION_HEALTHY: Final = "NodeRegistrationHealthy"
COND_AMIS_READY: Final = "AMIsReady"
COND_SUBNETS_READY: Final = "SubnetsReady"
COND_SECURITY_GROUPS_READY: Final = "SecurityGroupsReady"
COND_INSTANCE_PROFILE_READY: Final = "InstanceProfileReady"
COND_PLACEMENT_GROUP_READY: Final = "PlacementGroupReady"
COND_CAPACITY_RESERVATIONS_READY: Final = "CapacityReservationsReady"

# Resource names (Kubernetes core and well-known extended resources).
RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_PODS: Final = "pods"
RESOURCE_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
RESOURCE_AMD_GPU: Final = "amd.com/gpu"
RESOURCE_NEURON: Final = "aws.amazon.com/neuron"
RESOURCE_NEURON_CORE: Final = "aws.amazon.com/neuroncore"
RESOURCE_EFA: Final = "vpc.amazonaws.com/efa"
