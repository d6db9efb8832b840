"""The AWS provider's node repair policies (Karpenter AWS ``pkg/cloudprovider/cloudprovider.go``
``RepairPolicies`` and ``legacyRepairPolicies``), served by
:meth:`karpy.aws.cloudprovider.AWSCloudProvider.repair_policies`.

Two sets, as Karpenter v1.15 keeps them:

* :data:`REPAIR_POLICIES` — v1.15's set for node repair as a disruption method (``LEGACY_NODE_REPAIR=false``):
  kubelet ``Ready`` False/Unknown and the EKS node monitoring agent's ``StorageReady``, ``NetworkingReady``,
  ``KernelReady``, ``ContainerRuntimeReady`` False after 30 minutes with a 10-minute drain bound;
  ``AcceleratedHardwareReady`` False split by the GPU XID code in the reason: the reboot-clearable and the fatal
  XID families after 10 minutes (5-minute drain bound), any other reason (the set's one default fallback) after
  30 minutes (10-minute bound). Karpenter reboots the reboot-clearable family only with the AWS
  ``RebootForRepair`` gate, which karpy rejects, so every policy here replaces the node.
* :data:`LEGACY_REPAIR_POLICIES` — the set the legacy ``node.health`` controller uses
  (``LEGACY_NODE_REPAIR=true``): the same conditions, no reasons, no drain bounds, ``AcceleratedHardwareReady``
  after 10 minutes.
"""

from __future__ import annotations

from typing import Final

from karpy.cloudprovider.types import RepairPolicy

_MINUTE: Final = 60.0
_ANY: Final = ".*"
_REBOOT_CLEARABLE_XIDS: Final = r".*XID(46|48|54|62|63|95|109|110|136|140|143|155|156|158).*"
_FATAL_XIDS: Final = r".*XID(64|74|79|119|120).*"

# The node monitoring agent's conditions other than AcceleratedHardwareReady, in Karpenter's order.
_AGENT_CONDITIONS: Final = ("StorageReady", "NetworkingReady", "KernelReady", "ContainerRuntimeReady")

REPAIR_POLICIES: Final[tuple[RepairPolicy, ...]] = (
    RepairPolicy("Ready", "False", 30 * _MINUTE, _ANY, 10 * _MINUTE),
    RepairPolicy("Ready", "Unknown", 30 * _MINUTE, _ANY, 10 * _MINUTE),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * _MINUTE, _REBOOT_CLEARABLE_XIDS, 5 * _MINUTE),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * _MINUTE, _FATAL_XIDS, 5 * _MINUTE),
    RepairPolicy("AcceleratedHardwareReady", "False", 30 * _MINUTE, "", 10 * _MINUTE),  # the default fallback
    *(RepairPolicy(condition, "False", 30 * _MINUTE, _ANY, 10 * _MINUTE) for condition in _AGENT_CONDITIONS),
)

LEGACY_REPAIR_POLICIES: Final[tuple[RepairPolicy, ...]] = (
    RepairPolicy("Ready", "False", 30 * _MINUTE),
    RepairPolicy("Ready", "Unknown", 30 * _MINUTE),
    RepairPolicy("AcceleratedHardwareReady", "False", 10 * _MINUTE),
    *(RepairPolicy(condition, "False", 30 * _MINUTE) for condition in _AGENT_CONDITIONS),
)

__all__ = ["LEGACY_REPAIR_POLICIES", "REPAIR_POLICIES"]
