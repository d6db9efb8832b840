"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK.

The binaries are built from Go modules by ``e2e/cluster/build.sh`` (cached outside the repo, keyed by version);
the flags follow ``shared/reference/local-control-plane.md``: static token auth in ``system:masters``, RBAC,
a self-signed serving certificate (``--cert-dir``), ``--advertise-address=127.0.0.1
--endpoint-reconciler-type=none`` so no default route is needed, every port a free loopback port.

Every child runs in its own process group, under ``setpriv --pdeathsig`` so the kernel kills it if the process
that started it dies without tearing down (SIGKILL, crash); :meth:`ControlPlane.stop` sends SIGTERM to each
group in reverse start order, waits, then SIGKILLs. Logs go to ``<workdir>/logs/<component>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

from e2e.audit import ADMIN_USER
from e2e.helpers import ROOT, free_port

BUILD_SCRIPT = ROOT / "e2e" / "cluster" / "build.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The user karpy authenticates as in every e2e (``e2e.helpers.karpy_process``: a TokenRequest token of the
# ServiceAccount ``karpy/karpy`` that ``manifests/rbac.yaml`` binds).
KARPY_USER = "system:serviceaccount:karpy:karpy"
# Karpenter's KWOK provider as the live benchmark runs it (``benchmarks.live.karpenter.service_account_kubeconfig``):
# its writes are logged too, so the benchmark counts both controllers' writes alike.
KARPENTER_USER = "system:serviceaccount:karpenter:karpenter"


# Set to "1" in the environment of the cluster's supervisor to log the audited users' reads too (get, list, watch):
# the live benchmark (benchmarks/live) counts each controller's requests, not only its writes.
AUDIT_READS_ENV = "KARPY_AUDIT_READS"
# Set to "1" to log kube-scheduler's writes to pods (Bindings, status: PodScheduled=False "Unschedulable") and its
# events as well: every control-plane component authenticates as ``ADMIN_USER`` here, so they are logged for that user
# and told apart by User-Agent (``kube-scheduler/…``). The live benchmark counts them: under Karpenter kube-scheduler
# makes every Binding, under karpy karpy makes most, and "writes per pod" compares like with like only with both.
AUDIT_SCHEDULER_ENV = "KARPY_AUDIT_SCHEDULER"
# kube-scheduler's client QPS (burst: twice that) when set, else its default (50, burst 100: ``ClientConnection``
# defaults in ``pkg/scheduler/apis/config/v1/defaults.go``). At the default every pod's Unschedulable mark and every
# Binding kube-scheduler makes waits in that one token bucket, which bounds how fast ANY node provisioner can get
# pods Running here; the live benchmark can lift it (``--scheduler-qps``) to measure the controllers themselves.
SCHEDULER_QPS_ENV = "KARPY_KUBE_SCHEDULER_QPS"


def audit_policy(
    users: tuple[str, ...] = (KARPY_USER,), *, reads: bool = False, scheduler: bool = False
) -> dict[str, object]:
    """The apiserver audit policy (``audit.k8s.io/v1`` Policy): ``Metadata`` for the writes of ``users`` (create,
    update, patch, delete, deletecollection: who wrote what, when, with which user agent and response code),
    ``None`` for everything else, so the log costs the other suites almost nothing (only the controllers' writes
    are logged: the cluster passes karpy's and Karpenter's users). ``RequestReceived`` is omitted: one event per
    request, at ``ResponseComplete`` (or ``Panic``), whose ``requestReceivedTimestamp`` still says when the
    request arrived. ``reads``: their get/list/watch too (a watch is logged when it starts and when it ends; the
    cluster sets it when ``KARPY_AUDIT_READS=1``). ``scheduler``: the admin user's creates/updates/patches of
    ``pods/binding``, ``pods/status`` and events (core and ``events.k8s.io``) too — kube-scheduler's writes, among
    those of the other components sharing that user (``KARPY_AUDIT_SCHEDULER=1``)."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {
                "level": "Metadata",
                "users": list(users),
                "verbs": ["create", "update", "patch", "delete", "deletecollection"],
            },
            *([{"level": "Metadata", "users": list(users), "verbs": ["get", "list", "watch"]}] if reads else []),
            *([_SCHEDULER_WRITES] if scheduler else []),
            {"level": "None"},
        ],
    }


_SCHEDULER_WRITES: Final = {
    "level": "Metadata",
    "users": [ADMIN_USER],
    "verbs": ["create", "update", "patch"],
    "resources": [
        {"group": "", "resources": ["pods/binding", "pods/status", "events"]},
        {"group": "events.k8s.io", "resources": ["events"]},
    ],
}


class ControlPlaneError(RuntimeError):
    """A component did not start or did not become ready; the message carries its log's tail."""


def ensure_binaries(log: Path | None = None) -> Path:
    """Run ``build.sh`` (idempotent: builds only what is missing) and return the directory it prints last.

    Raises:
        ControlPlaneError: the build failed (the log's tail is in the message).
    """
    with log.open("ab") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=out, check=False)
    lines = proc.stdout.decode().strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = tail_of(log) if log else ""
        raise ControlPlaneError(f"build.sh failed with exit code {proc.returncode}\n{tail}")
    bindir = Path(lines[-1])
    missing = [c for c in COMPONENTS if not os.access(bindir / c, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"build.sh left no {', '.join(missing)} in {bindir}")
    return bindir


def tail_of(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' when unreadable)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def terminate_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``proc``'s process group (it was started with ``start_new_session``), wait up to ``timeout`` seconds,
    then SIGKILL the group; a process that already ended is left alone."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@dataclass
class Child:
    """One running component."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the child's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


def _stop_all(children: list[Child], timeout: float) -> None:
    """SIGTERM every child's group, wait up to ``timeout`` seconds in total, SIGKILL what is left."""
    for child in children:
        if child.alive():
            child.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGKILL)
            child.proc.wait(5)
        # A component's stray children (none expected) go with its group.
        child.signal(signal.SIGKILL)


@dataclass
class ControlPlane:
    """The control plane of one local cluster, rooted at ``workdir`` (wiped of old state on :meth:`start`)."""

    workdir: Path
    bindir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    etcd_port: int = 0
    apiserver_port: int = 0
    children: list[Child] = field(default_factory=list)

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig (static token in ``system:masters``, TLS verification skipped)."""
        return self.workdir / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log: one JSON ``audit.k8s.io/v1`` Event per line, karpy's writes only
        (:func:`audit_policy`), written synchronously (``--audit-log-mode=blocking``) before each response."""
        return self.logs / "audit.log"

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Start every component in order and wait until the cluster can run pods.

        Order: etcd (``/health``) → kube-apiserver (``/readyz``) → kube-controller-manager, kube-scheduler
        and KWOK together (``/healthz`` of each, and the ``default`` ServiceAccount, which proves the
        controller manager's controllers run).

        Raises:
            ControlPlaneError: a component exited or was not ready in time (its log's tail is in the message).
        """
        deadline = time.monotonic() + timeout
        self._prepare()
        etcd = self._start_etcd()
        self._wait(etcd, deadline, self._etcd_healthy)
        apiserver = self._start_apiserver()
        self._wait(apiserver, deadline, lambda: self._get("/readyz") == 200)
        kcm_port, sched_port, kwok_port = free_port(), free_port(), free_port()
        kcm = self._start_controller_manager(kcm_port)
        sched = self._start_scheduler(sched_port)
        kwok = self._start_kwok(kwok_port)
        self._wait(kcm, deadline, lambda: self._healthz(f"https://127.0.0.1:{kcm_port}/healthz"))
        self._wait(sched, deadline, lambda: self._healthz(f"https://127.0.0.1:{sched_port}/healthz"))
        self._wait(kwok, deadline, lambda: self._healthz(f"http://127.0.0.1:{kwok_port}/healthz"))
        self._wait(kcm, deadline, lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop everything: KWOK, scheduler and controller manager first, then the apiserver, then etcd."""
        order = list(reversed(self.children))
        head = [c for c in order if c.name not in ("kube-apiserver", "etcd")]
        _stop_all(head, timeout)
        _stop_all([c for c in order if c.name == "kube-apiserver"], timeout)
        _stop_all([c for c in order if c.name == "etcd"], timeout)
        self.children.clear()

    def failed(self) -> Child | None:
        """The first component that has exited, if any."""
        return next((c for c in self.children if not c.alive()), None)

    # -- files -------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.workdir.mkdir(parents=True, exist_ok=True)
        for stale in ("etcd", "pki"):
            shutil.rmtree(self.workdir / stale, ignore_errors=True)
        self.logs.mkdir(exist_ok=True)
        (self.workdir / "pki").mkdir()
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "pki" / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        (self.workdir / "pki" / "tokens.csv").write_text(f'{self.token},{ADMIN_USER},admin,"system:masters"\n')
        self.etcd_port, self.apiserver_port = free_port(), free_port()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        (self.workdir / "audit-policy.yaml").write_text(
            yaml.safe_dump(
                audit_policy(
                    (KARPY_USER, KARPENTER_USER),
                    reads=os.environ.get(AUDIT_READS_ENV) == "1",
                    scheduler=os.environ.get(AUDIT_SCHEDULER_ENV) == "1",
                )
            )
        )

    # -- components --------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            # setpriv --pdeathsig: the kernel SIGKILLs the component when this process (thread) dies, so a
            # crashed or SIGKILLed supervisor never leaves a control plane behind. Own process group: the
            # supervisor's group signals do not reach it half-way through an ordered teardown.
            proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--", str(self.bindir / name.split(":")[0]), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
                process_group=0,
            )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def _start_etcd(self) -> Child:
        peer = free_port()
        url = f"http://127.0.0.1:{self.etcd_port}"
        return self._spawn(
            "etcd",
            [
                "--name=local",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=local=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> Child:
        pki = self.workdir / "pki"
        return self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={pki}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # Pods are not rejected before the controller manager creates the default ServiceAccount.
                "--disable-admission-plugins=ServiceAccount",
                # Never dial a node's DNS name or private IP (loopback only); KWOK gives nodes 127.0.0.1.
                "--kubelet-preferred-address-types=InternalIP",
                # Light and fast on 2 shared cores: no API priority and fairness machinery, no profiling.
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                # Who wrote what and when, for the failover e2e's "never two writers" check (e2e/audit.py).
                # Blocking mode writes each event before the response, so none is lost or late; maxsize 0 never
                # rotates (only karpy's writes are logged, see audit_policy).
                f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=0",
                "--v=1",
            ],
        )

    def _start_controller_manager(self, port: int) -> Child:
        pki = self.workdir / "pki"
        return self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'pki' / 'kcm'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'apiserver.crt'}",
                "--controllers=*",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_scheduler(self, port: int) -> Child:
        qps = os.environ.get(SCHEDULER_QPS_ENV)
        return self._spawn(
            "kube-scheduler",
            [
                *([f"--kube-api-qps={int(qps)}", f"--kube-api-burst={2 * int(qps)}"] if qps else []),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'pki' / 'scheduler'}",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_kwok(self, port: int) -> Child:
        # An explicit (empty) configuration, so a developer's ~/.kwok/kwok.yaml cannot change the stages.
        config = self.workdir / "kwok.yaml"
        config.write_text("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {}\n")
        return self._spawn(
            "kwok",
            [
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=true",
                # Leases + the 20 s heartbeat stage (v0.7.0 picks stages by this flag), as kwokctl runs it.
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.1/16",
                "--node-ip=127.0.0.1",
                f"--server-address=127.0.0.1:{port}",
            ],
        )

    # -- probes --------------------------------------------------------------------------------------

    def _wait(self, child: Child, deadline: float, ready: Callable[[], bool]) -> None:
        while True:
            if not child.alive():
                raise ControlPlaneError(f"{child.name} exited with code {child.proc.returncode}\n{tail_of(child.log)}")
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{child.name} not ready in time\n{tail_of(child.log)}")
            time.sleep(0.2)

    def _etcd_healthy(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")

    def _get(self, path: str) -> int:
        """GET ``path`` on the apiserver as admin; the HTTP status."""
        request = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=5, context=_insecure()) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    @staticmethod
    def _healthz(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=_insecure()) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False


def _insecure() -> ssl.SSLContext:
    """TLS without verification: every server here self-signs on 127.0.0.1."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
