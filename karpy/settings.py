"""Settings from environment variables, with Karpenter's names, defaults and parsing.

Sources: Karpenter core ``pkg/operator/options/options.go`` and the AWS provider's
``pkg/operator/options/options.go`` + ``options_validation.go`` (v1.15.0). :data:`KARPENTER_SETTINGS` lists every
variable those register, with what karpy does with it (the README's settings table says the same):

* ``honoured``: wired to what it controls;
* ``rejected``: parsed, and a value karpy cannot honour (a feature gate karpy does not implement switched on,
  profiling asked for, ...) stops ``karpy run`` with :class:`UnsupportedSetting`;
* ``no-op``: accepted and documented as without effect, where Karpenter's own is without effect for this
  runtime or configuration (e.g. ``MEMORY_LIMIT``, a Go GC knob).

Parsing follows Karpenter's: Go's ``strconv.ParseBool`` spellings for booleans, ``strconv.Atoi`` integers,
``time.ParseDuration`` durations, ``Name=bool,...`` feature gates (k8s ``cliflag.MapStringBool``). One difference:
Karpenter falls back to the default on a value it cannot parse (``pkg/utils/env``); karpy stops with
:class:`SettingsError` naming the variable, so a typo never runs silently with a default.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import attrs
import durationpy
import yaml

from karpy.apis.quantity import QuantityError, parse_quantity

T = TypeVar("T")


class SettingsError(ValueError):
    """An environment variable holds an invalid value; the message names the variable."""


class UnsupportedSetting(SettingsError):
    """A valid Karpenter value karpy cannot honour (e.g. ``FEATURE_GATES=TerminateFirstRepair=true``); the message
    names the variable, the value and why, in one line."""


EXIT_SETTINGS = 2
"""``karpy run``'s exit code for invalid settings or another failed start-up check (see :mod:`karpy.cli.startup`)."""
EXIT_KUBECONFIG = 3
"""No usable kubeconfig."""
EXIT_APISERVER_UNREACHABLE = 4
"""The apiserver cannot be reached (connection, DNS, TLS, a timeout or a 5xx on ``/version``)."""
EXIT_CREDENTIALS_REJECTED = 5
"""The apiserver refused the credentials (401/403)."""


class StartupError(SettingsError):
    """karpy cannot start with these settings: no usable kubeconfig, a port in use, a missing interruption
    queue. The message names the variable; the command exits with ``exit_code`` (default 2: a settings or other
    start-up check; 3-5 for the kubeconfig and the apiserver, set where those are raised) with that one line."""

    def __init__(self, message: str, *, exit_code: int = EXIT_SETTINGS) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@attrs.frozen
class KarpenterSetting:
    """One of Karpenter's settings: ``name`` (env var; the flag is its lower-case, dashed form), ``default`` as
    Karpenter registers it (a Go duration, ``true``/``false``, digits, or ``""``), ``source`` (``core`` or
    ``aws``), ``disposition`` (``honoured`` | ``rejected`` | ``no-op``) and ``note`` (what karpy does)."""

    name: str
    default: str
    source: str
    disposition: str
    note: str


# Core feature gates (core options.go KarpenterFeatureGates) and the AWS provider's (AWS_FEATURE_GATES).
DEFAULT_FEATURE_GATES: Final[Mapping[str, bool]] = {
    "NodeRepair": False,
    "ReservedCapacity": True,
    "SpotToSpotConsolidation": False,
    "NodeOverlay": False,
    "StaticCapacity": False,
    "CapacityBuffer": False,
    "TerminateFirstDrift": False,
    "TerminateFirstRepair": False,
    "PodDeletionCostManagement": False,
}
DEFAULT_AWS_FEATURE_GATES: Final[Mapping[str, bool]] = {
    "NodeClassCEL": False,
    "DRANVIDIAGPU": False,
    "DRAEFA": False,
    "RebootForRepair": False,
}
# Gates karpy does not implement: switching one on is rejected (value: what the gate enables, for the message).
UNSUPPORTED_GATES: Final[Mapping[str, str]] = {
    "TerminateFirstDrift": "terminate-first drift replacement",
    "TerminateFirstRepair": "terminate-first repair",
    "PodDeletionCostManagement": "pod-deletion-cost management",
    "NodeClassCEL": "CEL expressions in EC2NodeClass kubelet fields",
    "DRANVIDIAGPU": "DRA for NVIDIA GPUs",
    "DRAEFA": "DRA for EFA",
    "RebootForRepair": "reboot as a repair action",
}


def _gates_text(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{name}={str(value).lower()}" for name, value in gates.items())


_S = KarpenterSetting
KARPENTER_SETTINGS: Final[tuple[KarpenterSetting, ...]] = (
    # core sigs.k8s.io/karpenter pkg/operator/options/options.go
    _S("KARPENTER_SERVICE", "", "core", "no-op", "no Karpenter v1.15 code reads it (the webhook it named is gone)"),
    _S("METRICS_PORT", "8080", "core", "honoured", "Prometheus /metrics port (0: no metrics server)"),
    _S("HEALTH_PROBE_PORT", "8081", "core", "honoured", "/healthz and /readyz port"),
    _S("KUBE_CLIENT_QPS", "200", "core", "honoured", "client-side apiserver rate limit (token bucket refill)"),
    _S("KUBE_CLIENT_BURST", "300", "core", "honoured", "client-side apiserver rate limit (token bucket size)"),
    _S(
        "ENABLE_PROFILING",
        "false",
        "core",
        "rejected",
        "true is rejected: Go's pprof endpoints have no karpy equivalent (profile the process with py-spy)",
    ),
    _S(
        "DISABLE_CONTROLLER_WARMUP",
        "true",
        "core",
        "no-op",
        "a karpy standby is always warm (informers, cluster state, Plans and work queues run before it is elected), "
        "more than Karpenter's warm-up gives",
    ),
    _S(
        "DISABLE_LEADER_ELECTION",
        "false",
        "core",
        "honoured",
        "false: replicas elect a leader on a coordination.k8s.io Lease (15 s lease, 10 s renew deadline, 2 s "
        "retry) and only the leader writes; true: this process writes unelected (run one replica)",
    ),
    _S(
        "DISABLE_CLUSTER_STATE_OBSERVABILITY",
        "false",
        "core",
        "honoured",
        "true turns off the pod/node/NodePool/instance-type metrics and the status-condition metrics and "
        "transition events (Launched, Registered, Initialized, Ready, …, Finalized), as in Karpenter",
    ),
    _S(
        "LEADER_ELECTION_NAME",
        "karpenter-leader-election",
        "core",
        "honoured",
        "the leader election Lease's name (unused with DISABLE_LEADER_ELECTION=true)",
    ),
    _S(
        "LEADER_ELECTION_NAMESPACE",
        "",
        "core",
        "honoured",
        "the Lease's namespace; empty: the pod's namespace (the service account's namespace file), and outside "
        "a cluster karpy stops at start (exit 2) until it is set",
    ),
    _S(
        "MEMORY_LIMIT",
        "-1",
        "core",
        "no-op",
        "Go's GC soft limit (90 %); CPython frees by reference counting and "
        "its cycle collector is driven by allocation counts, so there is no heap limit to set",
    ),
    _S(
        "CPU_REQUESTS",
        "1000",
        "core",
        "honoured",
        "millicores (<= 0 means 1000): each keyed reconciler runs "
        "karpy's per-core worker count x ceil(CPU_REQUESTS/1000), as Karpenter scales its concurrency",
    ),
    _S("LOG_LEVEL", "info", "core", "honoured", "debug, info or error"),
    _S(
        "LOG_OUTPUT_PATHS",
        "stdout",
        "core",
        "honoured",
        "comma-separated sinks for the JSON log lines: stdout, stderr or file paths",
    ),
    _S(
        "LOG_ERROR_OUTPUT_PATHS",
        "stderr",
        "core",
        "honoured",
        "where failures to write a log line are reported (zap's internal error output)",
    ),
    _S("BATCH_MAX_DURATION", "10s", "core", "honoured", "longest provisioning batch"),
    _S("BATCH_IDLE_DURATION", "1s", "core", "honoured", "idle gap that ends a provisioning batch"),
    _S("PREFERENCE_POLICY", "Respect", "core", "honoured", "Respect or Ignore"),
    _S("MIN_VALUES_POLICY", "Strict", "core", "honoured", "Strict or BestEffort"),
    _S("IGNORE_DRA_REQUESTS", "true", "core", "rejected", "false is rejected: karpy has no DRA support"),
    _S(
        "LEGACY_NODE_REPAIR",
        "false",
        "core",
        "honoured",
        "with the NodeRepair gate: true repairs as Karpenter's legacy node.health controller (legacy AWS policies, "
        "forceful), false as v1.15's repair method (v1.15 policies, drain bounds, do-not-repair, Unhealthy budget)",
    ),
    _S(
        "FEATURE_GATES",
        _gates_text(DEFAULT_FEATURE_GATES),
        "core",
        "rejected",
        "SpotToSpotConsolidation, ReservedCapacity (false: no capacity reservations), NodeRepair, StaticCapacity, "
        "CapacityBuffer and NodeOverlay honoured; any other gate set to true is rejected; unknown names are ignored "
        "with a "
        "warning, as Karpenter ignores them",
    ),
    _S(
        "SCHEDULER_CONFIG",
        "",
        "core",
        "rejected",
        "parsed; default topology spread constraints are rejected (karpy does not apply kube-scheduler defaults)",
    ),
    # AWS github.com/aws/karpenter-provider-aws pkg/operator/options/options.go
    _S(
        "CLUSTER_CA_BUNDLE",
        "",
        "aws",
        "honoured",
        "CA bundle for node user data and the EC2NodeClass hash; unset: "
        "the kubeconfig's CA data, else EKS DescribeCluster's",
    ),
    _S("CLUSTER_NAME", "", "aws", "honoured", "required: discovery, tags, launch template names"),
    _S("CLUSTER_ENDPOINT", "", "aws", "honoured", "API server URL for node user data; unset: EKS DescribeCluster"),
    _S("ISOLATED_VPC", "false", "aws", "honoured", "no Pricing API calls (static prices)"),
    _S(
        "EKS_CONTROL_PLANE",
        "false",
        "aws",
        "honoured",
        "true: the Kubernetes version comes from EKS DescribeCluster instead of the apiserver",
    ),
    _S("VM_MEMORY_OVERHEAD_PERCENT", "0.075", "aws", "honoured", "memory the hypervisor keeps"),
    _S("INTERRUPTION_QUEUE", "", "aws", "honoured", "SQS queue name for interruption events"),
    _S("RESERVED_ENIS", "0", "aws", "honoured", "ENIs kept out of the max-pods computation"),
    _S(
        "DISABLE_DRY_RUN",
        "false",
        "aws",
        "no-op",
        "karpy does not run Karpenter's EC2NodeClass dry-run authorization checks, so it behaves as true either way",
    ),
    _S("ENABLE_ZONAL_SHIFT", "false", "aws", "rejected", "true is rejected: karpy does not follow ARC zonal shifts"),
    _S("AMI_REFRESH_INTERVAL", "1m0s", "aws", "honoured", "how long resolved AMIs are cached (>= 1m)"),
    _S("SUBNET_REFRESH_INTERVAL", "1m0s", "aws", "honoured", "EC2NodeClass re-resolution (>= 1m)"),
    _S(
        "SECURITY_GROUP_REFRESH_INTERVAL",
        "1m0s",
        "aws",
        "honoured",
        "EC2NodeClass re-resolution (>= 1m); "
        "karpy re-resolves a class at the smaller of this and SUBNET_REFRESH_INTERVAL",
    ),
    _S(
        "AWS_FEATURE_GATES",
        _gates_text(DEFAULT_AWS_FEATURE_GATES),
        "aws",
        "rejected",
        "any gate set to true is rejected (none is implemented)",
    ),
)
del _S

# karpy's own settings (not Karpenter's): the AWS SDK's region/endpoint and karpy's disruption knobs.
KARPY_SETTINGS: Final[tuple[str, ...]] = (
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "INTERRUPTION_REBALANCE_REPLACEMENT",
    "DISRUPTION_POLL_INTERVAL",
    "DISRUPTION_VALIDATION_DELAY",
    "DISRUPTION_REPLACEMENT_TIMEOUT",
    "DISRUPTION_PAUSED",
    "DISRUPTION_PAUSE_NAMESPACE",
    "DISRUPTION_COOLDOWN",
    "CONSOLIDATION_MIN_SAVINGS_PER_HOUR",
    "CONSOLIDATION_MIN_SAVINGS_RATIO",
    "DRIFT_CHECK_INTERVAL",
)


def parse_duration(text: str) -> float:
    """A Go duration (``1s``, ``1m30s``, ``720h``, ``500ms``; Go's ``time.ParseDuration`` syntax, parsed by
    durationpy) in seconds. Negative durations are refused: no karpy setting or NodePool field takes one.

    Raises:
        ValueError: not a Go duration, or negative (the message quotes the text).
    """
    text = text.strip()
    try:
        seconds = durationpy.from_str(text).total_seconds()
    except ValueError as err:  # durationpy.DurationError: "Invalid duration …", "Unknown unit x in duration …"
        unit = f" ({str(err).split(' in duration')[0].lower()})" if str(err).startswith("Unknown unit") else ""
        raise ValueError(
            f"invalid duration {text!r}{unit}: want a Go duration such as 500ms, 10s, 1m30s or 720h"
        ) from None
    if seconds < 0:
        raise ValueError(f"invalid duration {text!r}: must not be negative")
    return seconds


_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(text: str) -> bool:
    """A boolean as Go's ``strconv.ParseBool`` reads it (``1 t T TRUE true True`` / ``0 f F FALSE false False``),
    how Karpenter reads its boolean variables.

    Raises:
        ValueError: any other spelling.
    """
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError(f"invalid boolean {text!r}: want true or false")


def parse_int(text: str) -> int:
    """A decimal integer as Go's ``strconv.Atoi``/``ParseInt(…, 10, 64)`` reads it (optional sign, digits only).

    Raises:
        ValueError: anything else, or outside int64.
    """
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"invalid integer {text!r}")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"integer {text!r} out of range")
    return value


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``Name=bool,...`` as k8s ``cliflag.MapStringBool.Set`` reads it (Karpenter's ``ParseFeatureGates``): empty
    items skipped, name and value trimmed, values by :func:`parse_bool`.

    Raises:
        ValueError: an item without ``=``, or a value that is not a boolean.
    """
    gates: dict[str, bool] = {}
    for part in text.split(","):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"malformed pair {part!r}, want Name=true|false")
        gates[name.strip()] = parse_bool(value.strip())
    return gates


def _memory_limit(text: str) -> int:
    """``MEMORY_LIMIT`` in bytes: an integer as Karpenter reads it, or (karpy's extension) a Kubernetes quantity
    such as ``1Gi``."""
    try:
        return parse_int(text)
    except ValueError:
        pass
    try:
        return math.ceil(parse_quantity(text))
    except QuantityError:
        raise ValueError(f"invalid memory limit {text!r}: want bytes (an integer) or a quantity such as 1Gi") from None


def _scheduler_config(text: str) -> str:
    """``SCHEDULER_CONFIG``: a YAML/JSON document with only ``podTopologySpread.defaultConstraints`` (Karpenter
    decodes it strictly). Returned as given; :func:`from_environment` rejects non-empty constraints."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"not YAML/JSON: {' '.join(str(err).split())}") from None
    if doc is None:
        return ""
    if not isinstance(doc, dict) or set(doc) - {"podTopologySpread"}:
        raise ValueError("want a document with only podTopologySpread")
    spread = doc.get("podTopologySpread") or {}
    if not isinstance(spread, dict) or set(spread) - {"defaultConstraints"}:
        raise ValueError("podTopologySpread takes only defaultConstraints")
    return text


@attrs.frozen
class Settings:
    """karpy's configuration. Durations are seconds; ports are TCP ports on all interfaces."""

    cluster_name: str
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""
    aws_region: str = "us-east-1"
    aws_endpoint_url: str = ""
    interruption_queue: str = ""
    # karpy's own (not Karpenter's): a rebalance recommendation also deletes the NodeClaim (pre-emptive
    # replacement) instead of only recording an event.
    interruption_rebalance_replacement: bool = False
    isolated_vpc: bool = False
    eks_control_plane: bool = False
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    batch_idle_duration: float = 1.0
    batch_max_duration: float = 10.0
    log_level: str = "info"
    log_output_paths: tuple[str, ...] = ("stdout",)
    log_error_output_paths: tuple[str, ...] = ("stderr",)
    metrics_port: int = 8080
    health_probe_port: int = 8081
    kube_client_qps: int = 200
    kube_client_burst: int = 300
    cpu_requests: int = 1000
    memory_limit: int = -1
    preference_policy: str = "Respect"
    min_values_policy: str = "Strict"
    feature_gates: Mapping[str, bool] = attrs.field(factory=lambda: dict(DEFAULT_FEATURE_GATES))
    aws_feature_gates: Mapping[str, bool] = attrs.field(factory=lambda: dict(DEFAULT_AWS_FEATURE_GATES))
    disable_leader_election: bool = False
    leader_election_name: str = "karpenter-leader-election"
    leader_election_namespace: str = ""
    disable_controller_warmup: bool = True
    disable_cluster_state_observability: bool = False
    disable_dry_run: bool = False
    enable_profiling: bool = False
    enable_zonal_shift: bool = False
    ignore_dra_requests: bool = True
    legacy_node_repair: bool = False
    karpenter_service: str = ""
    scheduler_config: str = ""
    ami_refresh_interval: float = 60.0
    subnet_refresh_interval: float = 60.0
    security_group_refresh_interval: float = 60.0
    # Warnings to log once karpy has started (e.g. an unknown feature gate ignored).
    notices: tuple[str, ...] = ()
    # karpy's disruption knobs (see karpy.controllers.disruption.controls); Karpenter's fixed values as defaults
    # where Karpenter has one (10 s poll, 15 s validation, 10 m replacement timeout).
    disruption_poll_interval: float = 10.0
    disruption_validation_delay: float = 15.0
    disruption_replacement_timeout: float = 600.0
    disruption_paused: bool = False
    disruption_pause_namespace: str = "kube-system"
    disruption_cooldown: float = 300.0
    consolidation_min_savings_per_hour: float = 0.0
    consolidation_min_savings_ratio: float = 0.1
    drift_check_interval: float = 300.0

    @property
    def cores(self) -> int:
        """The cores ``CPU_REQUESTS`` (millicores) requests, rounded up, at least 1."""
        return max(1, math.ceil(self.cpu_requests / 1000))

    def workers(self, per_core: int) -> int:
        """Concurrent workers of a keyed reconciler: ``per_core`` x :attr:`cores` (karpy's own proportional
        scaling, not Karpenter's ``LinearScaleReconciles``: that is :meth:`linear_workers`)."""
        return per_core * self.cores

    def linear_workers(self, minimum: int, maximum: int) -> int:
        """Concurrent workers scaled linearly with :attr:`cores`: ``minimum`` at 1 core, ``maximum`` at 60 and
        beyond (Karpenter core ``pkg/utils/controller/controller.go`` ``LinearScaleReconciles``: the slope is
        truncated to an int after multiplying, the result clamped to [minimum, maximum])."""
        slope = (maximum - minimum) / 59
        return min(maximum, max(minimum, minimum + int(slope * (self.cores - 1))))


def _get(env: Mapping[str, str], name: str, parse: Callable[[str], T], default: T) -> T:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as err:
        raise SettingsError(f"{name}={raw!r} is invalid: {err}") from None


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _non_negative(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def wrapped(text: str) -> Any:
        value = parse(text)
        if value < 0:
            raise ValueError("must be >= 0")
        return value

    return wrapped


def _finite_float(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _port(text: str) -> int:
    value = parse_int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port 0-65535")
    return value


def _url(text: str) -> str:
    if not re.match(r"^https?://[^/]+", text):
        raise ValueError("must be an absolute http(s) URL")
    return text


_STDOUT: tuple[str, ...] = ("stdout",)
_STDERR: tuple[str, ...] = ("stderr",)


def _paths(text: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    if not paths:
        raise ValueError("want comma-separated paths (stdout, stderr or files)")
    return paths


def _positive_duration(text: str) -> float:
    value = parse_duration(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _at_least_minute(text: str) -> float:
    value = parse_duration(text)
    if value < 60:
        raise ValueError("must be at least 1m")
    return value


def _unsupported(name: str, value: str, why: str) -> UnsupportedSetting:
    return UnsupportedSetting(f"{name}={value}: {why}")


def _gates(env: Mapping[str, str], name: str, defaults: Mapping[str, bool], notices: list[str]) -> dict[str, bool]:
    """The gates of ``name`` over ``defaults``; a gate karpy does not implement switched on is rejected; an unknown
    name is ignored, as Karpenter ignores it, with a notice.

    Raises:
        SettingsError: malformed. UnsupportedSetting: an unimplemented gate is on.
    """
    none: dict[str, bool] = {}
    given = _get(env, name, parse_feature_gates, none)
    gates = dict(defaults)
    for gate, value in given.items():
        if gate not in defaults:
            notices.append(f"{name}: unknown feature gate {gate!r} ignored (as Karpenter ignores it)")
            continue
        gates[gate] = value
        if value and gate in UNSUPPORTED_GATES:
            raise _unsupported(
                name, env[name], f"karpy does not implement {gate} ({UNSUPPORTED_GATES[gate]}); set {gate}=false"
            )
    return gates


def _check_unsupported(env: Mapping[str, str], options: Mapping[str, Any]) -> None:
    """Valid Karpenter values karpy cannot honour stop karpy (one line naming the variable, the value and why);
    ``options`` are :func:`_karpenter_options`' parsed values, ``env`` gives the value as written.

    Raises:
        UnsupportedSetting: the first such value.
    """
    if options["enable_profiling"]:
        raise _unsupported(
            "ENABLE_PROFILING",
            env["ENABLE_PROFILING"],
            "karpy has no pprof endpoints (Go's runtime profiler); profile the process with py-spy instead",
        )
    if not options["ignore_dra_requests"]:
        raise _unsupported(
            "IGNORE_DRA_REQUESTS",
            env["IGNORE_DRA_REQUESTS"],
            "karpy does not schedule pods' DRA resource claims; leave it true",
        )
    if options["enable_zonal_shift"]:
        raise _unsupported("ENABLE_ZONAL_SHIFT", env["ENABLE_ZONAL_SHIFT"], "karpy does not follow ARC zonal shifts")
    scheduler_config = options["scheduler_config"]
    if scheduler_config and (yaml.safe_load(scheduler_config).get("podTopologySpread") or {}).get("defaultConstraints"):
        raise _unsupported(
            "SCHEDULER_CONFIG",
            " ".join(scheduler_config.split()),
            "karpy does not apply default topology spread constraints (podTopologySpread.defaultConstraints)",
        )


IN_CLUSTER_NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def leader_election_namespace(settings: Settings, namespace_file: str = IN_CLUSTER_NAMESPACE_FILE) -> str:
    """The leader election Lease's namespace: ``LEADER_ELECTION_NAMESPACE``, else the pod's own namespace (the
    service account's namespace file), as controller-runtime finds it (``pkg/leaderelection/leader_election.go``,
    which fails with "unable to find leader election namespace" outside a cluster).

    Raises:
        StartupError: it is unset and the namespace file cannot be read (not running in a pod).
    """
    if settings.leader_election_namespace:
        return settings.leader_election_namespace
    try:
        with open(namespace_file, encoding="utf-8") as f:
            namespace = f.read().strip()
    except OSError:
        namespace = ""
    if not namespace:
        raise StartupError("LEADER_ELECTION_NAMESPACE: not running in a cluster; set it")
    return namespace


def from_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Read :class:`Settings` from ``env`` (default ``os.environ``): every variable of :data:`KARPENTER_SETTINGS`
    with Karpenter's default, and karpy's own (:data:`KARPY_SETTINGS`). An empty value counts as unset.

    Raises:
        SettingsError: a required variable is missing or a value is invalid (message names the variable).
        UnsupportedSetting: a valid value karpy cannot honour (message names the variable, value and why).
    """
    env = os.environ if env is None else env
    cluster_name = env.get("CLUSTER_NAME", "").strip()
    if not cluster_name:
        raise SettingsError("CLUSTER_NAME is required")
    notices: list[str] = []
    kwargs = _karpenter_options(env, notices)
    _check_unsupported(env, kwargs)
    kwargs.update(_karpy_options(env))
    return Settings(cluster_name=cluster_name, notices=tuple(notices), **kwargs)


def _karpenter_options(env: Mapping[str, str], notices: list[str]) -> dict[str, Any]:
    """Karpenter's settings (bar CLUSTER_NAME) as :class:`Settings` keyword arguments."""
    durations = _non_negative(parse_duration)
    cpu_requests = _get(env, "CPU_REQUESTS", parse_int, 1000)
    return {
        "cluster_endpoint": _get(env, "CLUSTER_ENDPOINT", _url, ""),
        "cluster_ca_bundle": env.get("CLUSTER_CA_BUNDLE", ""),
        "interruption_queue": env.get("INTERRUPTION_QUEUE", ""),
        "isolated_vpc": _get(env, "ISOLATED_VPC", parse_bool, False),
        "eks_control_plane": _get(env, "EKS_CONTROL_PLANE", parse_bool, False),
        "vm_memory_overhead_percent": _get(env, "VM_MEMORY_OVERHEAD_PERCENT", _non_negative(_finite_float), 0.075),
        "reserved_enis": _get(env, "RESERVED_ENIS", _non_negative(parse_int), 0),
        "batch_idle_duration": _get(env, "BATCH_IDLE_DURATION", durations, 1.0),
        "batch_max_duration": _get(env, "BATCH_MAX_DURATION", durations, 10.0),
        "log_level": _get(env, "LOG_LEVEL", _choice("debug", "info", "error"), "info"),
        "log_output_paths": _get(env, "LOG_OUTPUT_PATHS", _paths, _STDOUT),
        "log_error_output_paths": _get(env, "LOG_ERROR_OUTPUT_PATHS", _paths, _STDERR),
        "metrics_port": _get(env, "METRICS_PORT", _port, 8080),
        "health_probe_port": _get(env, "HEALTH_PROBE_PORT", _port, 8081),
        "kube_client_qps": _get(env, "KUBE_CLIENT_QPS", _non_negative(parse_int), 200),
        "kube_client_burst": _get(env, "KUBE_CLIENT_BURST", _non_negative(parse_int), 300),
        # Karpenter's Parse: a non-positive CPU_REQUESTS means 1000.
        "cpu_requests": cpu_requests if cpu_requests > 0 else 1000,
        "memory_limit": _get(env, "MEMORY_LIMIT", _memory_limit, -1),
        "preference_policy": _get(env, "PREFERENCE_POLICY", _choice("Respect", "Ignore"), "Respect"),
        "min_values_policy": _get(env, "MIN_VALUES_POLICY", _choice("Strict", "BestEffort"), "Strict"),
        "feature_gates": _gates(env, "FEATURE_GATES", DEFAULT_FEATURE_GATES, notices),
        "aws_feature_gates": _gates(env, "AWS_FEATURE_GATES", DEFAULT_AWS_FEATURE_GATES, notices),
        "disable_leader_election": _get(env, "DISABLE_LEADER_ELECTION", parse_bool, False),
        "leader_election_name": env.get("LEADER_ELECTION_NAME") or "karpenter-leader-election",
        "leader_election_namespace": env.get("LEADER_ELECTION_NAMESPACE", ""),
        "disable_controller_warmup": _get(env, "DISABLE_CONTROLLER_WARMUP", parse_bool, True),
        "disable_cluster_state_observability": _get(env, "DISABLE_CLUSTER_STATE_OBSERVABILITY", parse_bool, False),
        "disable_dry_run": _get(env, "DISABLE_DRY_RUN", parse_bool, False),
        "enable_profiling": _get(env, "ENABLE_PROFILING", parse_bool, False),
        "enable_zonal_shift": _get(env, "ENABLE_ZONAL_SHIFT", parse_bool, False),
        "ignore_dra_requests": _get(env, "IGNORE_DRA_REQUESTS", parse_bool, True),
        "legacy_node_repair": _get(env, "LEGACY_NODE_REPAIR", parse_bool, False),
        "karpenter_service": env.get("KARPENTER_SERVICE", ""),
        "scheduler_config": _get(env, "SCHEDULER_CONFIG", _scheduler_config, ""),
        "ami_refresh_interval": _get(env, "AMI_REFRESH_INTERVAL", _at_least_minute, 60.0),
        "subnet_refresh_interval": _get(env, "SUBNET_REFRESH_INTERVAL", _at_least_minute, 60.0),
        "security_group_refresh_interval": _get(env, "SECURITY_GROUP_REFRESH_INTERVAL", _at_least_minute, 60.0),
    }


def _karpy_options(env: Mapping[str, str]) -> dict[str, Any]:
    """karpy's own settings (:data:`KARPY_SETTINGS`) as :class:`Settings` keyword arguments."""
    return {
        "aws_region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        "aws_endpoint_url": _get(env, "AWS_ENDPOINT_URL", _url, ""),
        "interruption_rebalance_replacement": _get(env, "INTERRUPTION_REBALANCE_REPLACEMENT", parse_bool, False),
        "disruption_poll_interval": _get(env, "DISRUPTION_POLL_INTERVAL", _positive_duration, 10.0),
        "disruption_validation_delay": _get(env, "DISRUPTION_VALIDATION_DELAY", _non_negative(parse_duration), 15.0),
        "disruption_replacement_timeout": _get(env, "DISRUPTION_REPLACEMENT_TIMEOUT", _positive_duration, 600.0),
        "disruption_paused": _get(env, "DISRUPTION_PAUSED", parse_bool, False),
        "disruption_pause_namespace": env.get("DISRUPTION_PAUSE_NAMESPACE", "kube-system"),
        "disruption_cooldown": _get(env, "DISRUPTION_COOLDOWN", _non_negative(parse_duration), 300.0),
        "consolidation_min_savings_per_hour": _get(
            env, "CONSOLIDATION_MIN_SAVINGS_PER_HOUR", _non_negative(_finite_float), 0.0
        ),
        "consolidation_min_savings_ratio": _get(
            env, "CONSOLIDATION_MIN_SAVINGS_RATIO", _non_negative(_finite_float), 0.1
        ),
        "drift_check_interval": _get(env, "DRIFT_CHECK_INTERVAL", _positive_duration, 300.0),
    }
