"""Disruption settings: environment variables, defaults, validation, and their mapping onto the controller."""

from __future__ import annotations

import pytest

from karpy.controllers.disruption.controls import DisruptionSettings, from_settings
from karpy.settings import SettingsError, from_environment


def test_defaults_follow_karpenter_and_are_safe() -> None:
    knobs = from_settings(from_environment({"CLUSTER_NAME": "c"}))
    assert knobs == DisruptionSettings(
        poll=10.0,
        validation_delay=15.0,
        replacement_timeout=600.0,
        min_savings_per_hour=0.0,
        min_savings_ratio=0.1,
        cooldown=300.0,
        paused=False,
        pause_namespace="kube-system",
        spot_to_spot=False,
        drift_check_interval=300.0,
    )


def test_every_variable_is_read() -> None:
    env = {
        "CLUSTER_NAME": "c",
        "DISRUPTION_POLL_INTERVAL": "1s",
        "DISRUPTION_VALIDATION_DELAY": "0s",
        "DISRUPTION_REPLACEMENT_TIMEOUT": "2m",
        "DISRUPTION_PAUSED": "true",
        "DISRUPTION_PAUSE_NAMESPACE": "platform",
        "DISRUPTION_COOLDOWN": "10m",
        "CONSOLIDATION_MIN_SAVINGS_PER_HOUR": "0.05",
        "CONSOLIDATION_MIN_SAVINGS_RATIO": "0.25",
        "DRIFT_CHECK_INTERVAL": "1m",
        "FEATURE_GATES": "SpotToSpotConsolidation=true",
    }
    knobs = from_settings(from_environment(env))
    assert knobs == DisruptionSettings(1.0, 0.0, 120.0, 0.05, 0.25, 600.0, True, "platform", True, 60.0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DISRUPTION_POLL_INTERVAL", "0s"),
        ("DISRUPTION_REPLACEMENT_TIMEOUT", "soon"),
        ("DISRUPTION_COOLDOWN", "-1m"),
        ("CONSOLIDATION_MIN_SAVINGS_RATIO", "-0.1"),
        ("DISRUPTION_PAUSED", "maybe"),
    ],
)
def test_invalid_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        from_environment({"CLUSTER_NAME": "c", name: value})
