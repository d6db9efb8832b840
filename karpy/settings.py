"""Settings from environment variables, with Karpenter's names and defaults.

Sources: Karpenter core ``pkg/operator/options/options.go`` and the AWS provider's
``pkg/operator/options/options.go`` (see the README's settings table). An invalid value raises
:class:`SettingsError` naming the variable; ``karpy run`` prints it as one line and exits with code 2.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import durationpy

T = TypeVar("T")



class SettingsError(ValueError):
    """An environment variable holds an invalid value; the message names the variable."""


class StartupError(SettingsError):
    """karpy cannot start with these settings: no usable kubeconfig, a port in use, a missing interruption
    queue. The message names the variable; the command exits 2 with that one line."""


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


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "t"):
        return True
    if lowered in ("false", "0", "no", "f", ""):
        return False
    raise ValueError(f"invalid boolean {text!r}")


def _feature_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ValueError(f"invalid feature gate {part!r}, want Name=true|false")
        gates[name] = _bool(value)
    return gates


DEFAULT_FEATURE_GATES = {
    "NodeRepair": False,
    "ReservedCapacity": True,
    "SpotToSpotConsolidation": False,
    "NodeOverlay": False,
    "StaticCapacity": False,
    "CapacityBuffer": False,
}


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
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    batch_idle_duration: float = 1.0
    batch_max_duration: float = 10.0
    log_level: str = "info"
    metrics_port: int = 8080
    health_probe_port: int = 8081
    kube_client_qps: int = 200
    kube_client_burst: int = 300
    preference_policy: str = "Respect"
    min_values_policy: str = "Strict"
    feature_gates: Mapping[str, bool] = attrs.field(factory=lambda: dict(DEFAULT_FEATURE_GATES))
    disable_leader_election: bool = False
    leader_election_name: str = "karpenter-leader-election"
    leader_election_namespace: str = ""
    ami_refresh_interval: float = 60.0
    subnet_refresh_interval: float = 60.0
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


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port 0-65535")
    return value


def _url(text: str) -> str:
    if not re.match(r"^https?://[^/]+", text):
        raise ValueError("must be an absolute http(s) URL")
    return text


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


def from_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Read :class:`Settings` from ``env`` (default ``os.environ``).

    Raises:
        SettingsError: a required variable is missing or a value is invalid (message names the variable).
    """
    env = os.environ if env is None else env
    cluster_name = env.get("CLUSTER_NAME", "").strip()
    if not cluster_name:
        raise SettingsError("CLUSTER_NAME is required")
    gates = dict(DEFAULT_FEATURE_GATES)
    no_gates: dict[str, bool] = {}
    gates.update(_get(env, "FEATURE_GATES", _feature_gates, no_gates))
    batch_idle = _get(env, "BATCH_IDLE_DURATION", _non_negative(parse_duration), 1.0)
    batch_max = _get(env, "BATCH_MAX_DURATION", _non_negative(parse_duration), 10.0)
    return Settings(
        cluster_name=cluster_name,
        cluster_endpoint=_get(env, "CLUSTER_ENDPOINT", _url, ""),
        cluster_ca_bundle=env.get("CLUSTER_CA_BUNDLE", ""),
        aws_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_endpoint_url=_get(env, "AWS_ENDPOINT_URL", _url, ""),
        interruption_queue=env.get("INTERRUPTION_QUEUE", ""),
        interruption_rebalance_replacement=_get(env, "INTERRUPTION_REBALANCE_REPLACEMENT", _bool, False),
        isolated_vpc=_get(env, "ISOLATED_VPC", _bool, False),
        vm_memory_overhead_percent=_get(env, "VM_MEMORY_OVERHEAD_PERCENT", _non_negative(float), 0.075),
        reserved_enis=_get(env, "RESERVED_ENIS", _non_negative(int), 0),
        batch_idle_duration=batch_idle,
        batch_max_duration=batch_max,
        log_level=_get(env, "LOG_LEVEL", _choice("debug", "info", "error"), "info"),
        metrics_port=_get(env, "METRICS_PORT", _port, 8080),
        health_probe_port=_get(env, "HEALTH_PROBE_PORT", _port, 8081),
        kube_client_qps=_get(env, "KUBE_CLIENT_QPS", _non_negative(int), 200),
        kube_client_burst=_get(env, "KUBE_CLIENT_BURST", _non_negative(int), 300),
        preference_policy=_get(env, "PREFERENCE_POLICY", _choice("Respect", "Ignore"), "Respect"),
        min_values_policy=_get(env, "MIN_VALUES_POLICY", _choice("Strict", "BestEffort"), "Strict"),
        feature_gates=gates,
        disable_leader_election=_get(env, "DISABLE_LEADER_ELECTION", _bool, False),
        leader_election_name=env.get("LEADER_ELECTION_NAME") or "karpenter-leader-election",
        leader_election_namespace=env.get("LEADER_ELECTION_NAMESPACE", ""),
        ami_refresh_interval=_get(env, "AMI_REFRESH_INTERVAL", _at_least_minute, 60.0),
        subnet_refresh_interval=_get(env, "SUBNET_REFRESH_INTERVAL", _at_least_minute, 60.0),
        disruption_poll_interval=_get(env, "DISRUPTION_POLL_INTERVAL", _positive_duration, 10.0),
        disruption_validation_delay=_get(env, "DISRUPTION_VALIDATION_DELAY", _non_negative(parse_duration), 15.0),
        disruption_replacement_timeout=_get(env, "DISRUPTION_REPLACEMENT_TIMEOUT", _positive_duration, 600.0),
        disruption_paused=_get(env, "DISRUPTION_PAUSED", _bool, False),
        disruption_pause_namespace=env.get("DISRUPTION_PAUSE_NAMESPACE", "kube-system"),
        disruption_cooldown=_get(env, "DISRUPTION_COOLDOWN", _non_negative(parse_duration), 300.0),
        consolidation_min_savings_per_hour=_get(env, "CONSOLIDATION_MIN_SAVINGS_PER_HOUR", _non_negative(float), 0.0),
        consolidation_min_savings_ratio=_get(env, "CONSOLIDATION_MIN_SAVINGS_RATIO", _non_negative(float), 0.1),
        drift_check_interval=_get(env, "DRIFT_CHECK_INTERVAL", _positive_duration, 300.0),
    )
