"""The API resources karpy reads and writes, and their REST paths."""

from __future__ import annotations

from typing import Final

import attrs


@attrs.frozen(slots=True)
class Resource:
    """An API resource: ``group``/``version``/``plural``; ``namespaced`` decides the path shape."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``group/version``, or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """REST path; a namespaced resource with ``namespace=None`` lists across all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS: Final = Resource("", "v1", "pods", "Pod", True)
NODES: Final = Resource("", "v1", "nodes", "Node", False)
EVENTS: Final = Resource("", "v1", "events", "Event", True)
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", False)
DAEMONSETS: Final = Resource("apps", "v1", "daemonsets", "DaemonSet", True)
PERSISTENTVOLUMES: Final = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
PERSISTENTVOLUMECLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
STORAGECLASSES: Final = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
DEPLOYMENTS: Final = Resource("apps", "v1", "deployments", "Deployment", True)
STATEFULSETS: Final = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
REPLICASETS: Final = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
PODTEMPLATES: Final = Resource("", "v1", "podtemplates", "PodTemplate", True)
CAPACITYBUFFERS: Final = Resource("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer", True)
PDBS: Final = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
NODEPOOLS: Final = Resource("karpenter.sh", "v1", "nodepools", "NodePool", False)
NODECLAIMS: Final = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False)
EC2NODECLASSES: Final = Resource("karpenter.k8s.aws", "v1", "ec2nodeclasses", "EC2NodeClass", False)
NODEOVERLAYS: Final = Resource("karpenter.sh", "v1alpha1", "nodeoverlays", "NodeOverlay", False)
CRDS: Final = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
