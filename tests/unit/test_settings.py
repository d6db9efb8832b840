"""Settings: Karpenter's env names and defaults; invalid values name the variable and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from karpy.settings import SettingsError, from_environment, parse_duration


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


def test_cli_exits_2_with_one_line() -> None:
    """`karpy run` with a bad value prints one line naming the variable and exits 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "karpy", "run"],
        env={"CLUSTER_NAME": "c", "BATCH_MAX_DURATION": "ten", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "BATCH_MAX_DURATION" in lines[0]
