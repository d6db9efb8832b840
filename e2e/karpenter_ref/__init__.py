"""A reference built from Karpenter's own Go modules, for tests that compare karpy against Karpenter v1.15.

``build.sh`` (next to this file) builds ``main.go`` against ``sigs.k8s.io/karpenter`` and
``github.com/aws/karpenter-provider-aws`` (pinned there) into ``~/.cache/karpy-karpenter-ref/...`` once; this
module locates or builds that binary and runs its subcommands:

- :meth:`KarpenterRef.crds`: the CRDs the modules' ``pkg/apis`` packages embed, as parsed dicts;
- :meth:`KarpenterRef.hashes`: ``NodePool.Hash()`` / ``EC2NodeClass.Hash()`` and the annotations Karpenter's
  hash controllers write, for manifests pruned and defaulted with the embedded CRD schemas as the API server
  would store them (``object`` in each result is that defaulted manifest);
- :meth:`KarpenterRef.userdata`: the user data the provider's AMI family renders for an EC2NodeClass + NodeClaim;
  :meth:`KarpenterRef.launch_template` adds the block device mappings the launch template gets.
- :meth:`KarpenterRef.settings`: the settings (env vars, flags, defaults) the core and AWS options register.

Nothing of Karpenter's is copied into the repository: its sources stay in the Go module cache.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"


class ReferenceError(RuntimeError):
    """The reference could not be built or a subcommand failed; the message carries its stderr's tail."""


def go_available() -> bool:
    """Whether a Go toolchain is on PATH (the build fetches a newer one from the module proxy when needed)."""
    return shutil.which("go") is not None


def ensure_binary(log: Path | None = None) -> Path:
    """Run ``build.sh`` (idempotent; ``nice -n 19`` so a first build yields the CPU) and return the binary's path.

    A first build downloads the modules and compiles for a few minutes; later calls return at once.

    Raises:
        ReferenceError: the build failed (the tail of its output is in the message).
    """
    proc = subprocess.run(["nice", "-n", "19", "bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if log is not None:
        with log.open("a") as f:
            f.write(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.splitlines()[-30:])
        raise ReferenceError(f"karpenter_ref/build.sh failed with exit code {proc.returncode}\n{tail}")
    return Path(lines[-1])


def _yaml_stream(objects: Iterable[Mapping[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(dict(o), sort_keys=False) for o in objects)


@dataclass(frozen=True)
class HashResult:
    """One object's reference hash: ``kind``, ``name``, ``hash`` (decimal string, hashstructure v2 FNV),
    ``annotations`` (the hash and hash-version annotations Karpenter writes) and ``object`` (the manifest
    after CRD pruning and defaulting, what Karpenter hashed)."""

    kind: str
    name: str
    hash: str
    annotations: dict[str, str]
    object: dict[str, Any]


@dataclass(frozen=True)
class KarpenterRef:
    """Runs the built ``karpenter-ref`` binary at ``binary``."""

    binary: Path

    def _run(self, args: list[str], stdin: str = "") -> str:
        proc = subprocess.run([str(self.binary), *args], input=stdin, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ReferenceError(f"karpenter-ref {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def crds(self, source: str = "all") -> list[dict[str, Any]]:
        """The embedded CRDs: ``source`` ``aws`` (the provider's, what an AWS install applies), ``core``, or
        ``all`` (the provider's, then core's others such as CapacityBuffer)."""
        return [d for d in yaml.safe_load_all(self._run(["crds", "--source", source])) if d]

    def hashes(
        self, objects: Iterable[Mapping[str, Any]], ca_bundle: str | None = None, defaults: bool = True
    ) -> list[HashResult]:
        """Karpenter's hashes for NodePool/EC2NodeClass manifests, in input order.

        ``ca_bundle`` enters the EC2NodeClass hash as Karpenter's discovered/configured cluster CA bundle does;
        ``defaults=False`` hashes the manifests as given instead of as the API server would store them.

        Raises:
            ReferenceError: an object is of another kind or does not convert to Karpenter's Go type.
        """
        args = ["hash"]
        if ca_bundle:
            args += ["--ca-bundle", ca_bundle]
        if not defaults:
            args.append("--no-defaults")
        out = self._run(args, _yaml_stream(objects))
        return [HashResult(**json.loads(line)) for line in out.splitlines() if line.strip()]

    def userdata(
        self,
        nodeclass: Mapping[str, Any],
        nodeclaim: Mapping[str, Any],
        *,
        cluster_name: str = "karpy",
        cluster_endpoint: str = "https://127.0.0.1:6443",
        ca_bundle: str | None = None,
        cluster_cidr: str | None = None,
        kube_dns_ip: str | None = None,
        max_pods: int = 110,
    ) -> tuple[str, str]:
        """``(amiFamily, userData)`` the provider's AMI family renders for the pair (``userData`` decoded from
        the base64 Karpenter puts in the launch template), with the arguments its
        launch-template resolver passes (taints + startup taints + the unregistered taint, allowed labels,
        maxPods and clusterDNS filled in when the kubelet config leaves them unset)."""
        result = self.launch_template(
            nodeclass,
            nodeclaim,
            cluster_name=cluster_name,
            cluster_endpoint=cluster_endpoint,
            ca_bundle=ca_bundle,
            cluster_cidr=cluster_cidr,
            kube_dns_ip=kube_dns_ip,
            max_pods=max_pods,
        )
        return result.ami_family, result.user_data

    def launch_template(
        self,
        nodeclass: Mapping[str, Any],
        nodeclaim: Mapping[str, Any],
        *,
        cluster_name: str = "karpy",
        cluster_endpoint: str = "https://127.0.0.1:6443",
        ca_bundle: str | None = None,
        cluster_cidr: str | None = None,
        kube_dns_ip: str | None = None,
        max_pods: int = 110,
    ) -> LaunchTemplateResult:
        """What the ``userdata`` subcommand prints: the family, its user data (as :meth:`userdata`) and the
        block device mappings the launch template gets (the EC2NodeClass's, else the family's defaults)."""
        args = ["userdata", "--cluster-name", cluster_name, "--cluster-endpoint", cluster_endpoint]
        args += ["--max-pods", str(max_pods)]
        optional = (("--ca-bundle", ca_bundle), ("--cluster-cidr", cluster_cidr), ("--kube-dns-ip", kube_dns_ip))
        for flag, value in optional:
            if value:
                args += [flag, value]
        result = json.loads(self._run(args, _yaml_stream([nodeclass, nodeclaim])))
        return LaunchTemplateResult(
            ami_family=str(result["amiFamily"]),
            user_data=base64.b64decode(result["userData"]).decode(),
            block_device_mappings=list(result.get("blockDeviceMappings") or []),
        )

    def settings(self) -> list[dict[str, Any]]:
        """Every setting Karpenter's core and AWS options register, sorted by ``env``: ``env``, ``flag``,
        ``source`` (``core``/``aws``), ``type`` (Go flag value type, ``bool`` for ``BoolVarWithEnv``), ``default``
        (as registered with none of the variables set; durations in Go's ``1m0s`` form) and ``env_verified``
        (registering again with the variable set picked its value up)."""
        return [json.loads(line) for line in self._run(["settings"]).splitlines() if line.strip()]


@dataclass(frozen=True)
class LaunchTemplateResult:
    """The ``userdata`` subcommand's answer: ``ami_family`` (``EC2NodeClass.AMIFamily()``), ``user_data``
    (decoded text) and ``block_device_mappings`` (EC2NodeClass JSON form: ``deviceName``, ``ebs`` with
    ``volumeSize`` as a quantity string)."""

    ami_family: str
    user_data: str
    block_device_mappings: list[dict[str, Any]]
