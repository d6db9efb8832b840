"""karpy's side of the live measurement, the counterpart of :func:`benchmarks.live.karpenter._measure`.

karpy runs as in every e2e (``e2e.helpers.karpy_process``: its CRDs and RBAC from ``manifests/``, its own
ServiceAccount, AWS = moto, Nodes registered by the node agent), with a NodePool of the same requirements as
:func:`benchmarks.live.karpenter.nodepool` (linux/amd64 on-demand, ``WhenEmpty`` after 30 s) on an EC2NodeClass
of the local cluster, and the same Deployment; peak RSS and CPU seconds come from ``/proc/<pid>`` of the
``python -m karpy run`` process just before it is stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.live.karpenter import provision, read_usage

AWS_PROVIDER_PREFIX = "aws://"


async def measure(
    cluster_env: Mapping[str, str], cluster_name: str, workdir: Path, pods: int, timeout: float = 900.0
) -> dict[str, Any]:
    """karpy on the running local cluster described by ``cluster_env`` (its ``env`` file): install, start, wait
    for the NodePool to be Ready, provision ``pods`` pods; the figures as a dict (the keys of
    :class:`benchmarks.live.karpenter.Provisioned` plus ready/usage keys)."""
    from benchmarks.live.runtime import runtime_python
    from e2e import helpers
    from karpy.kube.client import KubeClient

    client = await KubeClient.from_environment(cluster_env["KUBECONFIG"])
    aws_env = {k: v for k, v in cluster_env.items() if k.startswith("AWS_")}
    karpy = await helpers.karpy_process(client, cluster_env["CLUSTER_ENDPOINT"], cluster_name, workdir, aws_env)
    karpy.python = str(runtime_python())  # as the image runs it (benchmarks/live/runtime.py)
    try:
        await helpers.apply(
            client,
            [
                helpers.ec2nodeclass("default", cluster_name),
                helpers.nodepool(
                    "default",
                    requirements=[
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
                    limits={"cpu": "100000"},
                ),
            ],
        )
        started = time.monotonic()
        karpy.start()
        await helpers.wait_for(lambda: _probe_ok(karpy), timeout=120, what="karpy /readyz")
        ready_seconds = time.monotonic() - started
        nodepools = helpers.KINDS["NodePool"]
        await helpers.wait_for(
            lambda: helpers.condition_ready(client, nodepools, "default"), timeout=60, what="NodePool Ready"
        )
        result = await provision(client, "inflate", pods, provider_prefix=AWS_PROVIDER_PREFIX, timeout=timeout)
        assert karpy.proc is not None
        used = read_usage(karpy.proc.pid)
        created = await helpers.nodeclaim_counters(karpy.metrics_port)
        return {
            "controller": "karpy",
            "ready_seconds": round(ready_seconds, 2),
            **asdict(result),
            "nodeclaims_created_total": float(created[0]),
            "peak_rss_mib": round(used.peak_rss_bytes / 2**20, 1),
            "cpu_seconds": round(used.cpu_seconds, 2),
        }
    finally:
        karpy.stop()
        await client.close()


async def _probe_ok(karpy: Any) -> bool:
    return bool(await asyncio.to_thread(karpy.probe) == 200)
