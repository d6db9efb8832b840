"""``karpy run``'s flags: one per Karpenter setting, generated from :data:`karpy.settings.KARPENTER_SETTINGS`.

Karpenter registers every option twice: as an environment variable and as a flag named after it in lower case with
dashes (``CLUSTER_NAME`` → ``--cluster-name``), whose default is the variable's value (core
``pkg/operator/options/options.go`` ``AddFlags``, the AWS provider's ``pkg/operator/options/options.go``; for example
``fs.StringVar(&o.ClusterName, "cluster-name", env.WithDefaultString("CLUSTER_NAME", ""), …)``). So a flag given on
the command line wins over the variable, and an unset flag leaves the variable (or Karpenter's default) in force.
karpy does the same by laying the given flags over the environment before :func:`karpy.settings.from_environment`
parses it: a flag's value is parsed, validated and rejected exactly as the variable's would be.

Boolean flags follow Go's ``flag`` package: ``--disable-leader-election`` alone means true, and
``--disable-leader-election=false`` (or ``… false``) sets false.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from karpy.settings import KARPENTER_SETTINGS, KarpenterSetting

_BOOLEAN_DEFAULTS = ("true", "false")


def flag_name(setting: KarpenterSetting) -> str:
    """The flag of a setting, as Karpenter names it: ``CLUSTER_NAME`` → ``--cluster-name``."""
    return "--" + setting.name.lower().replace("_", "-")


def is_boolean(setting: KarpenterSetting) -> bool:
    """Whether Karpenter registers the setting as a boolean flag (``BoolVarWithEnv``): its default is true/false."""
    return setting.default in _BOOLEAN_DEFAULTS


def add_setting_flags(
    parser: argparse.ArgumentParser, settings: tuple[KarpenterSetting, ...] = KARPENTER_SETTINGS
) -> None:
    """Add one flag per setting to ``parser``; each stores its raw text under the setting's variable name (``None``
    when not given). The help shows the variable, Karpenter's default and what karpy does with it."""
    group = parser.add_argument_group(
        "settings", "each flag overrides the environment variable of the same name (flags win over the environment)"
    )
    for setting in settings:
        default = setting.default if setting.default != "" else '""'
        help_text = f"{setting.note} (env {setting.name}; default {default})".replace("%", "%%")
        if is_boolean(setting):
            group.add_argument(
                flag_name(setting),
                dest=setting.name,
                nargs="?",
                const="true",
                default=None,
                metavar="true|false",
                help=help_text,
            )
        else:
            group.add_argument(flag_name(setting), dest=setting.name, default=None, metavar="VALUE", help=help_text)


def environment_with_flags(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with every flag given on the command line laid over its variable (a flag wins over the
    environment, as in Karpenter, where the variable is only the flag's default)."""
    env = dict(environ)
    for setting in KARPENTER_SETTINGS:
        value = getattr(args, setting.name, None)
        if value is not None:
            env[setting.name] = value
    return env


__all__ = ["add_setting_flags", "environment_with_flags", "flag_name", "is_boolean"]
