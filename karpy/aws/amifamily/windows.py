"""Windows 2019/2022/2025: a ``<powershell>`` block calling ``Start-EKSBootstrap.ps1`` (Karpenter AWS
``pkg/providers/amifamily/windows.go`` and ``bootstrap/windows.go``).

::

    <powershell>
    <the EC2NodeClass's spec.userData, verbatim, when set>
    [string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"
    & $EKSBootstrapScriptFile -EKSClusterName '<cluster>' -APIServerEndpoint '<endpoint>' \\
      -Base64ClusterCA '<ca>' -KubeletExtraArgs '<kubelet flags>' -DNSClusterIP '<clusterDNS[0]>'   (one line)
    </powershell>

Karpenter inserts the user's text as is, its own ``<powershell>`` tags included. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from karpy.aws.amifamily.bootstrap import BootstrapOptions, cluster_dns, kubelet_extra_args

ROOT_DEVICE: Final = "/dev/sda1"
ROOT_VOLUME_GIB: Final = 50
# node.kubernetes.io/windows-build per family (Karpenter AWS pkg/apis/v1 Windows*Build).
BUILDS: Final = {"Windows2019": "10.0.17763", "Windows2022": "10.0.20348", "Windows2025": "10.0.26100"}


def user_data(opts: BootstrapOptions) -> str:
    """The PowerShell user data (text)."""
    out = ["<powershell>\n"]
    if opts.custom_user_data:
        out.append(opts.custom_user_data + "\n")
    out.append('[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"\n')
    out.append(
        f"& $EKSBootstrapScriptFile -EKSClusterName '{opts.cluster_name}' -APIServerEndpoint '{opts.cluster_endpoint}'"
    )
    if opts.ca_bundle is not None:
        out.append(f" -Base64ClusterCA '{opts.ca_bundle}'")
    if args := kubelet_extra_args(opts):
        out.append(f" -KubeletExtraArgs '{' '.join(args)}'")
    if dns := cluster_dns(opts.kubelet):
        out.append(f" -DNSClusterIP '{dns[0]}'")
    out.append("\n</powershell>")
    return "".join(out)
