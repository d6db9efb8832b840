"""``karpy run``'s flags mirror the environment variables as Karpenter's binary registers them (core and AWS
``pkg/operator/options/options.go``: a flag per option, named after the variable in lower case with dashes, whose
default is the variable), generated from the settings table; a flag wins over the variable."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from karpy.cli.flags import add_setting_flags, environment_with_flags, flag_name, is_boolean
from karpy.cli.main import main
from karpy.settings import KARPENTER_SETTINGS, from_environment

ROOT = Path(__file__).resolve().parents[2]

# Karpenter v1.15's flag names, as its options.go files register them (a sample across core and AWS).
KARPENTER_FLAGS = (
    "--cluster-name",
    "--cluster-endpoint",
    "--cluster-ca-bundle",
    "--interruption-queue",
    "--metrics-port",
    "--health-probe-port",
    "--leader-election-name",
    "--leader-election-namespace",
    "--disable-leader-election",
    "--kube-client-qps",
    "--batch-max-duration",
    "--feature-gates",
    "--aws-feature-gates",
    "--vm-memory-overhead-percent",
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    return parser.parse_args(list(argv))


def test_one_flag_per_setting_named_as_karpenter() -> None:
    flags = [flag_name(s) for s in KARPENTER_SETTINGS]
    assert len(flags) == len(set(flags))
    assert set(KARPENTER_FLAGS) <= set(flags)
    assert flag_name(next(s for s in KARPENTER_SETTINGS if s.name == "CLUSTER_NAME")) == "--cluster-name"


def test_help_lists_every_flag() -> None:
    """`karpy run --help` (the real command) names every setting's flag and its variable."""
    result = subprocess.run(
        [sys.executable, "-m", "karpy", "run", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for setting in KARPENTER_SETTINGS:
        assert flag_name(setting) in text, setting.name
        assert f"env {setting.name};" in text, setting.name
    assert "Exit codes" in text


def test_flag_wins_over_the_environment() -> None:
    env = environment_with_flags(
        parse("--metrics-port", "9000", "--cluster-name", "from-flag"),
        {"METRICS_PORT": "8000", "CLUSTER_NAME": "from-env", "HEALTH_PROBE_PORT": "7000"},
    )
    settings = from_environment(env)
    assert (settings.metrics_port, settings.cluster_name) == (9000, "from-flag")
    assert settings.health_probe_port == 7000  # no flag: the variable stays in force


def test_unset_flags_leave_the_environment_alone() -> None:
    environ = {"CLUSTER_NAME": "c", "BATCH_IDLE_DURATION": "2s"}
    assert environment_with_flags(parse(), environ) == environ


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (("--isolated-vpc",), True),
        (("--isolated-vpc=true",), True),
        (("--isolated-vpc=false",), False),
        (("--isolated-vpc", "false"), False),
        ((), False),
    ],
)
def test_boolean_flags_as_go_flag(argv: tuple[str, ...], value: bool) -> None:
    """Go's flag package: a bare boolean flag is true; ``=false`` sets false."""
    setting = next(s for s in KARPENTER_SETTINGS if s.name == "ISOLATED_VPC")
    assert is_boolean(setting)
    env = environment_with_flags(parse(*argv), {"CLUSTER_NAME": "c"})
    assert from_environment(env).isolated_vpc is value


def test_a_flag_value_is_validated_as_its_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid flag fails as the variable would (one line naming it, exit 2); --cluster-name satisfies the
    required CLUSTER_NAME with the variable unset."""
    for name in [s.name for s in KARPENTER_SETTINGS] + ["CLUSTER_NAME"]:
        monkeypatch.delenv(name, raising=False)
    assert "CLUSTER_NAME" not in os.environ
    assert main(["run", "--cluster-name", "c", "--metrics-port", "eighty"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["karpy: invalid settings: METRICS_PORT='eighty' is invalid: invalid integer 'eighty'"]


def test_unsupported_flag_value_is_rejected_as_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLUSTER_NAME", "c")
    monkeypatch.delenv("ENABLE_ZONAL_SHIFT", raising=False)
    assert main(["run", "--enable-zonal-shift"]) == 2
    assert capsys.readouterr().err.startswith("karpy: unsupported setting: ENABLE_ZONAL_SHIFT=true:")
