"""karpy's Karpenter settings against the options Karpenter v1.15 registers (the reference's ``settings``
subcommand: core and AWS ``pkg/operator/options`` AddFlags, read with none of the variables set)."""

from __future__ import annotations

import pytest

from e2e.karpenter_ref import KarpenterRef
from karpy.settings import KARPENTER_SETTINGS, from_environment, parse_duration


def test_names_sources_and_defaults_equal_karpenters(karpenter_ref: KarpenterRef) -> None:
    """The same variables, from the same options (core or AWS), with the same defaults, as Karpenter's."""
    reference = karpenter_ref.settings()
    assert all(s["env_verified"] for s in reference), [s["env"] for s in reference if not s["env_verified"]]
    theirs = {s["env"]: (s["source"], s["default"]) for s in reference}
    ours = {s.name: (s.source, s.default) for s in KARPENTER_SETTINGS}
    assert ours == theirs


@pytest.mark.parametrize("kind", ["flag.durationValue", "flag.intValue", "flag.int64Value", "flag.float64Value"])
def test_reference_defaults_are_karpys_values(karpenter_ref: KarpenterRef, kind: str) -> None:
    """Karpenter's numeric defaults, parsed by karpy, are karpy's defaults (seconds, integers, fractions)."""
    settings = from_environment({"CLUSTER_NAME": "c"})
    for setting in (s for s in karpenter_ref.settings() if s["type"] == kind):
        value = getattr(settings, setting["env"].lower())
        expected = parse_duration(setting["default"]) if kind == "flag.durationValue" else float(setting["default"])
        assert value == expected, setting
