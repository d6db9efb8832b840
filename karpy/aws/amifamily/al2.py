"""AL2: ``/etc/eks/bootstrap.sh`` in a MIME archive after the user's parts (Karpenter AWS
``pkg/providers/amifamily/al2.go`` and ``bootstrap/eksbootstrap.go``).

The script::

    #!/bin/bash -xe
    exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1
    /etc/eks/bootstrap.sh '<cluster>' --apiserver-endpoint '<endpoint>' --b64-cluster-ca '<ca>' \\
    --ip-family ipv6 \\                      # when clusterDNS[0] is IPv6
    --dns-cluster-ip '<clusterDNS[0]>' \\
    --use-max-pods false \\                  # when maxPods is a number
    --kubelet-extra-args '<kubelet flags>' \\
    --local-disks raid0                      # instanceStorePolicy RAID0

The user's ``spec.userData`` is kept part by part (all headers) when it is MIME, else wrapped as one
``text/x-shellscript; charset="us-ascii"`` part; the bootstrap part comes last. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from karpy.aws.amifamily import mime
from karpy.aws.amifamily.bootstrap import BootstrapOptions, cluster_dns, kubelet_extra_args

ROOT_DEVICE: Final = "/dev/xvda"


def _is_ipv6(dns: list[str]) -> bool:
    if not dns:
        return False
    try:
        return ipaddress.ip_address(dns[0]).version == 6
    except ValueError:
        return True  # net.ParseIP(...).To4() == nil for an unparsable address


def bootstrap_script(opts: BootstrapOptions) -> str:
    """The bootstrap.sh shell script (see the module docstring)."""
    ca = f"--b64-cluster-ca '{opts.ca_bundle}'" if opts.ca_bundle is not None else ""
    out = [
        "#!/bin/bash -xe\n",
        "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
        f"/etc/eks/bootstrap.sh '{opts.cluster_name}' --apiserver-endpoint '{opts.cluster_endpoint}' {ca}",
    ]
    dns = cluster_dns(opts.kubelet)
    if _is_ipv6(dns):
        out.append(" \\\n--ip-family ipv6")
    if dns:
        out.append(f" \\\n--dns-cluster-ip '{dns[0]}'")
    max_pods = opts.kubelet.get("maxPods")
    if isinstance(max_pods, int) and not isinstance(max_pods, bool):
        out.append(" \\\n--use-max-pods false")
    if args := kubelet_extra_args(opts):
        out.append(f" \\\n--kubelet-extra-args '{' '.join(args)}'")
    if opts.instance_store_policy == "RAID0":
        out.append(" \\\n--local-disks raid0")
    return "".join(out)


def _mime_parts(user_data: str) -> list[mime.Part]:
    if mime.is_mime(user_data):
        return mime.parse(user_data)
    return [([("Content-Type", mime.SHELL_SCRIPT)], user_data)]


def user_data(opts: BootstrapOptions) -> str:
    """The MIME multi-part user data (text).

    Raises:
        karpy.aws.amifamily.mime.MIMEError: ``spec.userData`` claims to be MIME but is not multipart.
    """
    parts = [p for ud in (opts.custom_user_data or "", bootstrap_script(opts)) if ud for p in _mime_parts(ud)]
    return mime.serialize(parts)
