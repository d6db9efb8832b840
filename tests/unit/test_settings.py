"""Settings: Karpenter's env names, defaults and parsing; invalid values name the variable and exit 2; values karpy
cannot honour are rejected in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from karpy.settings import (
    DEFAULT_AWS_FEATURE_GATES,
    DEFAULT_FEATURE_GATES,
    KARPENTER_SETTINGS,
    KARPY_SETTINGS,
    UNSUPPORTED_GATES,
    KarpenterSetting,
    SettingsError,
    StartupError,
    UnsupportedSetting,
    from_environment,
    leader_election_namespace,
    parse_bool,
    parse_duration,
    parse_feature_gates,
    parse_int,
)


def test_defaults_match_karpenter() -> None:
    """Only CLUSTER_NAME is required; the rest default as Karpenter's options do."""
    s = from_environment({"CLUSTER_NAME": "c"})
    assert (s.batch_idle_duration, s.batch_max_duration) == (1.0, 10.0)
    assert (s.metrics_port, s.health_probe_port) == (8080, 8081)
    assert s.vm_memory_overhead_percent == 0.075
    assert s.log_level == "info" and s.preference_policy == "Respect"
    assert s.feature_gates["SpotToSpotConsolidation"] is False
    assert s.interruption_queue == ""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("10s", 10.0), ("1m30s", 90.0), ("720h", 2592000.0), ("500ms", 0.5), ("0", 0.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    """Go duration syntax as Karpenter's flags accept it."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "1", "1x", "s", "1s2", "-1s"])
def test_bad_durations(bad: str) -> None:
    """Anything else is rejected."""
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BATCH_IDLE_DURATION", "soon"),
        ("METRICS_PORT", "http"),
        ("HEALTH_PROBE_PORT", "70000"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "-0.1"),
        ("LOG_LEVEL", "verbose"),
        ("CLUSTER_ENDPOINT", "not-a-url"),
        ("FEATURE_GATES", "SpotToSpotConsolidation"),
        ("PREFERENCE_POLICY", "Maybe"),
    ],
)
def test_invalid_value_names_the_variable(name: str, value: str) -> None:
    """The error message starts with the variable's name."""
    with pytest.raises(SettingsError, match=f"^{name}="):
        from_environment({"CLUSTER_NAME": "c", name: value})


def test_cluster_name_required() -> None:
    """CLUSTER_NAME has no default."""
    with pytest.raises(SettingsError, match="CLUSTER_NAME is required"):
        from_environment({})


def run_karpy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``karpy run`` with CLUSTER_NAME=c and ``env`` only (no kubeconfig: a settings error comes first)."""
    return subprocess.run(
        [sys.executable, "-m", "karpy", "run"],
        env={"CLUSTER_NAME": "c", "PATH": "/usr/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_exits_2_with_one_line() -> None:
    """`karpy run` with a bad value prints one line naming the variable and exits 2."""
    proc = run_karpy({"BATCH_MAX_DURATION": "ten"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "BATCH_MAX_DURATION" in lines[0]


# Every Karpenter v1.15 setting ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# The 34 environment variables Karpenter's settings reference (docs, v1.14-v1.15) lists; the reference document
# (shared/reference/karpenter-metrics-settings.md, outside the repository) is read too when it is present.
DOCUMENTED = frozenset(
    {
        "AMI_REFRESH_INTERVAL",
        "BATCH_IDLE_DURATION",
        "BATCH_MAX_DURATION",
        "CLUSTER_CA_BUNDLE",
        "CLUSTER_ENDPOINT",
        "CLUSTER_NAME",
        "CPU_REQUESTS",
        "DISABLE_CLUSTER_STATE_OBSERVABILITY",
        "DISABLE_CONTROLLER_WARMUP",
        "DISABLE_DRY_RUN",
        "DISABLE_LEADER_ELECTION",
        "EKS_CONTROL_PLANE",
        "ENABLE_PROFILING",
        "ENABLE_ZONAL_SHIFT",
        "FEATURE_GATES",
        "HEALTH_PROBE_PORT",
        "IGNORE_DRA_REQUESTS",
        "INTERRUPTION_QUEUE",
        "ISOLATED_VPC",
        "KARPENTER_SERVICE",
        "KUBE_CLIENT_BURST",
        "KUBE_CLIENT_QPS",
        "LEADER_ELECTION_NAME",
        "LEADER_ELECTION_NAMESPACE",
        "LOG_ERROR_OUTPUT_PATHS",
        "LOG_LEVEL",
        "LOG_OUTPUT_PATHS",
        "MEMORY_LIMIT",
        "METRICS_PORT",
        "MIN_VALUES_POLICY",
        "PREFERENCE_POLICY",
        "RESERVED_ENIS",
        "SUBNET_REFRESH_INTERVAL",
        "VM_MEMORY_OVERHEAD_PERCENT",
    }
)
# Registered by the v1.15.0 Go options (core and AWS pkg/operator/options/options.go) but not in the docs' list;
# tests/reference/test_karpenter_settings.py checks the whole set against the built reference.
UNDOCUMENTED = frozenset(
    {"LEGACY_NODE_REPAIR", "SCHEDULER_CONFIG", "SECURITY_GROUP_REFRESH_INTERVAL", "AWS_FEATURE_GATES"}
)
BASE = {"CLUSTER_NAME": "c"}


def _reference_document_names() -> frozenset[str] | None:
    for shared in (ROOT.parent / "shared", ROOT.parent.parent / "shared"):
        path = shared / "reference" / "karpenter-metrics-settings.md"
        if path.is_file():
            section = path.read_text().split("## Settings", 1)[1]
            return frozenset(re.findall(r"\b[A-Z][A-Z0-9_]{3,}\b", section.split("\n\n", 2)[-1]))
    return None


def test_karpy_knows_every_karpenter_setting() -> None:
    """karpy reads the 34 documented settings and the 4 more the v1.15.0 options register, no other name."""
    names = [s.name for s in KARPENTER_SETTINGS]
    assert len(names) == len(set(names)) == 38
    assert set(names) == DOCUMENTED | UNDOCUMENTED
    assert len(DOCUMENTED) == 34
    documented = _reference_document_names()
    if documented is not None:
        assert documented == DOCUMENTED
    assert not set(KARPY_SETTINGS) & set(names)


@pytest.mark.parametrize("setting", KARPENTER_SETTINGS, ids=lambda s: s.name)
def test_karpenter_default_spelled_out_equals_unset(setting: KarpenterSetting) -> None:
    """Each variable set to Karpenter's default reads as unset does (the table's defaults are karpy's)."""
    if setting.name == "CLUSTER_NAME":
        return
    unset = attrs.evolve(from_environment(BASE), notices=())
    env = {**BASE, setting.name: setting.default}
    assert attrs.evolve(from_environment(env), notices=()) == unset
    assert setting.disposition in ("honoured", "rejected", "no-op") and setting.note


def test_defaults_of_every_class() -> None:
    """Karpenter's defaults, by kind: durations, booleans, integers, quantities, strings, gates."""
    s = from_environment(BASE)
    assert (s.ami_refresh_interval, s.subnet_refresh_interval, s.security_group_refresh_interval) == (60, 60, 60)
    assert (s.isolated_vpc, s.eks_control_plane, s.enable_profiling, s.enable_zonal_shift) == (False,) * 4
    assert (s.disable_controller_warmup, s.ignore_dra_requests, s.disable_dry_run) == (True, True, False)
    assert (s.kube_client_qps, s.kube_client_burst, s.cpu_requests, s.memory_limit) == (200, 300, 1000, -1)
    assert (s.log_output_paths, s.log_error_output_paths) == (("stdout",), ("stderr",))
    assert (s.leader_election_name, s.leader_election_namespace, s.karpenter_service) == (
        "karpenter-leader-election",
        "",
        "",
    )
    assert dict(s.feature_gates) == dict(DEFAULT_FEATURE_GATES) and s.feature_gates["ReservedCapacity"] is True
    assert set(s.aws_feature_gates) == {"NodeClassCEL", "DRANVIDIAGPU", "DRAEFA", "RebootForRepair"}
    assert not any(s.aws_feature_gates.values())
    assert s.scheduler_config == "" and s.min_values_policy == "Strict"


@pytest.mark.parametrize(
    ("text", "value"),
    [*((t, True) for t in ("1", "t", "T", "TRUE", "true", "True"))]
    + [(t, False) for t in ("0", "f", "F", "FALSE", "false", "False")],
)
def test_booleans_as_go_parses_them(text: str, value: bool) -> None:
    """strconv.ParseBool's spellings, how Karpenter reads ISOLATED_VPC and the other booleans."""
    assert parse_bool(text) is value
    assert from_environment({**BASE, "ISOLATED_VPC": text}).isolated_vpc is value


@pytest.mark.parametrize("bad", ["yes", "no", "on", "tRUE", " true", "2"])
def test_other_booleans_are_invalid(bad: str) -> None:
    """Karpenter would silently use the default for these; karpy names the variable instead."""
    with pytest.raises(SettingsError, match=r"^EKS_CONTROL_PLANE="):
        from_environment({**BASE, "EKS_CONTROL_PLANE": bad})


@pytest.mark.parametrize(("text", "value"), [("+5", 5), ("-1", -1), ("0", 0), ("9223372036854775807", 2**63 - 1)])
def test_integers_as_go_parses_them(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize("bad", ["1_000", " 5", "5.0", "0x10", "9223372036854775808", ""])
def test_other_integers_are_invalid(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_int(bad)


def test_quantities_and_cpu_requests() -> None:
    """MEMORY_LIMIT: bytes, or a Kubernetes quantity; CPU_REQUESTS: millicores, <= 0 meaning 1000 (Karpenter's
    Parse), scaling the reconcilers' workers."""
    assert from_environment({**BASE, "MEMORY_LIMIT": "1073741824"}).memory_limit == 2**30
    assert from_environment({**BASE, "MEMORY_LIMIT": "1Gi"}).memory_limit == 2**30
    with pytest.raises(SettingsError, match=r"^MEMORY_LIMIT='lots'"):
        from_environment({**BASE, "MEMORY_LIMIT": "lots"})
    assert from_environment({**BASE, "CPU_REQUESTS": "0"}).cpu_requests == 1000
    assert from_environment({**BASE, "CPU_REQUESTS": "-5"}).cpu_requests == 1000
    s = from_environment({**BASE, "CPU_REQUESTS": "2500"})
    assert (s.cpu_requests, s.workers(2), s.workers(8)) == (2500, 6, 24)
    assert from_environment(BASE).workers(8) == 8


def test_feature_gates_parse_as_karpenter_does() -> None:
    """MapStringBool: empty items skipped, names and values trimmed, unset gates keep their defaults."""
    assert parse_feature_gates(" SpotToSpotConsolidation = true ,,ReservedCapacity=F") == {
        "SpotToSpotConsolidation": True,
        "ReservedCapacity": False,
    }
    s = from_environment({**BASE, "FEATURE_GATES": "SpotToSpotConsolidation=true,ReservedCapacity=false"})
    assert s.feature_gates["SpotToSpotConsolidation"] is True and s.feature_gates["ReservedCapacity"] is False
    assert s.feature_gates["NodeRepair"] is False


def test_unknown_feature_gate_is_ignored_with_a_notice() -> None:
    """Karpenter ignores a gate name it does not know; karpy too, but says so once it has started."""
    s = from_environment({**BASE, "FEATURE_GATES": "Drift=true"})
    assert "Drift" not in s.feature_gates
    assert s.notices == ("FEATURE_GATES: unknown feature gate 'Drift' ignored (as Karpenter ignores it)",)


def test_leader_election_is_honoured() -> None:
    """Unset or false: elect a leader (Karpenter's default), with no notice; true: run unelected."""
    for env in (BASE, {**BASE, "DISABLE_LEADER_ELECTION": "false"}):
        s = from_environment(env)
        assert s.disable_leader_election is False and s.notices == ()
    assert from_environment({**BASE, "DISABLE_LEADER_ELECTION": "true"}).disable_leader_election is True
    s = from_environment({**BASE, "LEADER_ELECTION_NAME": "lease", "LEADER_ELECTION_NAMESPACE": "ops"})
    assert (s.leader_election_name, s.leader_election_namespace) == ("lease", "ops")


def test_leader_election_namespace_defaults_to_the_pods_namespace(tmp_path: Path) -> None:
    """LEADER_ELECTION_NAMESPACE empty: the service account's namespace file (controller-runtime's default);
    outside a cluster karpy stops at start with one line naming the variable."""
    namespace_file = tmp_path / "namespace"
    assert leader_election_namespace(from_environment({**BASE, "LEADER_ELECTION_NAMESPACE": "ops"})) == "ops"
    with pytest.raises(StartupError, match=r"^LEADER_ELECTION_NAMESPACE: not running in a cluster; set it$"):
        leader_election_namespace(from_environment(BASE), str(namespace_file))
    namespace_file.write_text("karpenter\n")
    assert leader_election_namespace(from_environment(BASE), str(namespace_file)) == "karpenter"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        *(("FEATURE_GATES", f"{gate}=true") for gate in DEFAULT_FEATURE_GATES if gate in UNSUPPORTED_GATES),
        *(("AWS_FEATURE_GATES", f"{gate}=true") for gate in DEFAULT_AWS_FEATURE_GATES),
        ("FEATURE_GATES", "SpotToSpotConsolidation=true,TerminateFirstDrift=true"),
        ("ENABLE_PROFILING", "true"),
        ("IGNORE_DRA_REQUESTS", "false"),
        ("ENABLE_ZONAL_SHIFT", "true"),
        ("SCHEDULER_CONFIG", "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone}]}"),
    ],
)
def test_values_karpy_cannot_honour_are_rejected_in_one_line(name: str, value: str) -> None:
    """A valid Karpenter value karpy cannot honour: one line naming the variable, the value and why."""
    with pytest.raises(UnsupportedSetting) as caught:
        from_environment({**BASE, name: value})
    message = str(caught.value)
    assert message.startswith(f"{name}={' '.join(value.split())}: ") and "\n" not in message
    assert "karpy" in message


def test_every_unimplemented_gate_is_rejected() -> None:
    """Each core gate karpy does not implement, and every AWS gate."""
    implemented = {
        "SpotToSpotConsolidation",
        "ReservedCapacity",
        "NodeRepair",
        "StaticCapacity",
        "CapacityBuffer",
        "NodeOverlay",
    }
    core = set(DEFAULT_FEATURE_GATES) - implemented
    assert set(UNSUPPORTED_GATES) == core | set(DEFAULT_AWS_FEATURE_GATES)


def test_scheduler_config_without_constraints_is_accepted() -> None:
    assert from_environment({**BASE, "SCHEDULER_CONFIG": "podTopologySpread: {}"}).scheduler_config
    with pytest.raises(SettingsError, match=r"^SCHEDULER_CONFIG="):
        from_environment({**BASE, "SCHEDULER_CONFIG": "profiles: []"})


def test_log_paths_are_comma_separated() -> None:
    s = from_environment({**BASE, "LOG_OUTPUT_PATHS": "stdout, /tmp/karpy.log", "LOG_ERROR_OUTPUT_PATHS": "stdout"})
    assert (s.log_output_paths, s.log_error_output_paths) == (("stdout", "/tmp/karpy.log"), ("stdout",))


@pytest.mark.parametrize("name", ["SECURITY_GROUP_REFRESH_INTERVAL", "AMI_REFRESH_INTERVAL", "SUBNET_REFRESH_INTERVAL"])
def test_refresh_intervals_are_at_least_a_minute(name: str) -> None:
    """As AWS options_validation.go requires."""
    assert getattr(from_environment({**BASE, name: "90s"}), name.lower()) == 90
    with pytest.raises(SettingsError, match=f"^{name}='30s' is invalid: must be at least 1m"):
        from_environment({**BASE, name: "30s"})


def test_cli_rejects_an_unsupported_setting_with_one_line() -> None:
    """`karpy run` with a gate karpy does not implement: one line naming it and why, exit 2."""
    proc = run_karpy({"FEATURE_GATES": "TerminateFirstRepair=true"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "karpy: unsupported setting: FEATURE_GATES=TerminateFirstRepair=true: karpy does not implement "
        "TerminateFirstRepair (terminate-first repair); set TerminateFirstRepair=false"
    ]


def test_readme_lists_every_setting() -> None:
    """The README's settings table has a row for each of Karpenter's settings and each of karpy's own."""
    section = (ROOT / "README.md").read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    rows = {name for cell in first_cells for name in re.findall(r"`([A-Z0-9_]+)`", cell)}
    assert {s.name for s in KARPENTER_SETTINGS} <= rows
    assert set(KARPY_SETTINGS) - {"AWS_DEFAULT_REGION"} <= rows
