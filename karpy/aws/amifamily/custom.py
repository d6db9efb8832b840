"""Custom: the EC2NodeClass's ``spec.userData`` unchanged, no default block devices (EC2 uses the AMI's)
(Karpenter AWS ``pkg/providers/amifamily/custom.go`` and ``bootstrap/custom.go``). Pure: no I/O."""

from __future__ import annotations

from karpy.aws.amifamily.bootstrap import BootstrapOptions


def user_data(opts: BootstrapOptions) -> str:
    """``spec.userData`` as given ("" when unset)."""
    return opts.custom_user_data or ""
