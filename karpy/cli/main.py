"""``karpy run``: start the controller. Configuration comes from environment variables (README settings table)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from karpy import logs
from karpy.settings import SettingsError, from_environment


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run; exit code 2 on invalid settings."""
    parser = argparse.ArgumentParser(prog="karpy", description="Just-in-time nodes for Kubernetes on AWS.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the controller (settings from environment variables)")
    args = parser.parse_args(argv)
    if args.command == "run":
        try:
            settings = from_environment()
        except SettingsError as err:
            print(f"karpy: invalid settings: {err}", file=sys.stderr)
            return 2
        logs.configure(settings.log_level)
        from karpy.operator import run

        try:
            import uvloop

            uvloop.install()
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            pass
        asyncio.run(run(settings))
        return 0
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
