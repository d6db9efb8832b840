"""AMI families: the user data and default block devices Karpenter v1.15 gives a node of each family
(Karpenter AWS ``pkg/providers/amifamily``), one module per family along Karpenter's seam:

- :mod:`.al2023` (nodeadm ``NodeConfig`` in MIME), :mod:`.al2` (``bootstrap.sh`` in MIME),
  :mod:`.bottlerocket` (TOML settings), :mod:`.windows` (PowerShell), :mod:`.custom` (user data as given);
- :mod:`.bootstrap` the options every family gets and the shared kubelet flags; :mod:`.mime` and :mod:`.toml`
  the encoders (Go's ``mime/multipart`` and go-toml v2 output);
- :mod:`.resolver` chooses the family (``amiFamily`` or the alias) and resolves the inputs.

Pure: no I/O.
"""

from karpy.aws.amifamily.bootstrap import BootstrapOptions
from karpy.aws.amifamily.resolver import (
    AL2,
    AL2023,
    BOTTLEROCKET,
    CUSTOM,
    FAMILIES,
    WINDOWS2019,
    WINDOWS2022,
    WINDOWS2025,
    ami_version,
    block_device_mappings,
    bootstrap_options,
    default_block_device_mappings,
    ephemeral_block_device,
    family_of,
    is_windows,
    launch_taints,
    reject_forbidden_labels,
    resolve_kubelet,
    user_data,
)

__all__ = [
    "AL2",
    "AL2023",
    "BOTTLEROCKET",
    "CUSTOM",
    "FAMILIES",
    "WINDOWS2019",
    "WINDOWS2022",
    "WINDOWS2025",
    "BootstrapOptions",
    "ami_version",
    "block_device_mappings",
    "bootstrap_options",
    "default_block_device_mappings",
    "ephemeral_block_device",
    "family_of",
    "is_windows",
    "launch_taints",
    "reject_forbidden_labels",
    "resolve_kubelet",
    "user_data",
]
