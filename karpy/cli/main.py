"""The ``karpy`` command.

* ``karpy run``: start the controller. Configuration comes from environment variables (README settings table) and
  the flags of the same names (``--cluster-name`` …, :mod:`karpy.cli.flags`), which win; exit codes in
  :mod:`karpy.cli.startup`.
* ``karpy simulate``: what-if provisioning on manifests, no cluster and no AWS credentials (README
  "Simulating provisioning"); see :mod:`karpy.simulate`.
* ``karpy explain POD``: why each NodePool can or cannot host a pending pod of a live cluster, and the
  simulation's plan for it (:mod:`karpy.cli.explain`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from karpy import logs
from karpy.cli import startup
from karpy.cli.flags import add_setting_flags, environment_with_flags
from karpy.settings import SettingsError, StartupError, UnsupportedSetting, from_environment


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="what-if provisioning on manifests (no cluster, no AWS credentials)",
        description="Read manifests, run karpy's scheduling engine on them and print the nodes it would launch.",
    )
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE_OR_DIR",
        help="manifest file, directory (recursive *.yaml/*.yml/*.json) or - for stdin; repeatable",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--catalogue", metavar="FILE.json", help="instance catalogue file (format in the README)")
    where.add_argument("--region", help="built-in EC2 catalogue of this region (default us-east-1)")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")
    p.add_argument("--preference-policy", choices=("Respect", "Ignore"), default="Respect")
    p.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="[NAMESPACE/]NAME=N",
        help="run N pods of that Deployment/ReplicaSet/StatefulSet/Job instead of its replicas; repeatable",
    )
    p.add_argument(
        "--spot-price-ratio",
        type=float,
        metavar="R",
        help="built-in catalogue: price spot at R x on-demand (an estimate; default: spot unavailable)",
    )
    p.add_argument("--vm-memory-overhead-percent", type=float, default=0.075, help="as the controller setting")
    p.add_argument("--reserved-enis", type=int, default=0, help="as the controller setting")
    p.add_argument(
        "--consolidate",
        action="store_true",
        help="also show what consolidation would do to the manifests' Nodes under each NodePool's policy",
    )
    p.add_argument(
        "--timings",
        action="store_true",
        help="print the seconds of each phase on stderr (read, catalogue, prepare, solve, launch, consolidate, output)",
    )


def _scale(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, count = item.rpartition("=")
        if not sep or not name or not count.isdigit():
            raise ValueError(f"--scale {item!r}: expected [NAMESPACE/]NAME=N")
        out[name] = int(count)
    return out


def simulate_command(args: argparse.Namespace) -> int:
    """``karpy simulate``: exit 0 with a plan (even with unschedulable pods), 2 on invalid input.

    With ``--timings``, one stderr line ``karpy simulate timings: read=S catalogue=S prepare=S solve=S launch=S
    output=S total=S`` (seconds; ``read`` is reading, defaulting, validating and expanding the manifests, which
    are streamed together; ``prepare`` translating them for the engine; ``launch`` choosing each NodeClaim's
    offering and building the plan).
    """
    from karpy.simulate.catalogue import CatalogueError, choose_catalogue
    from karpy.simulate.manifests import collect
    from karpy.simulate.plan import plan_to_json, render_text, simulate
    from karpy.simulate.reading import iter_sources
    from karpy.simulate.validation import ManifestError

    clock = _PhaseClock()
    try:
        scale = _scale(args.scale)
        manifests = collect(iter_sources(args.files), scale)
        clock.lap("read")
        catalogue = choose_catalogue(
            args.catalogue,
            args.region or "us-east-1",
            spot_price_ratio=args.spot_price_ratio,
            vm_memory_overhead_percent=args.vm_memory_overhead_percent,
            reserved_enis=args.reserved_enis,
        )
        clock.lap("catalogue")
    except (ManifestError, CatalogueError, ValueError) as err:
        print(f"karpy simulate: {err}", file=sys.stderr)
        return 2
    plan = simulate(manifests, catalogue, preference_policy=args.preference_policy, phases=clock.phases)
    clock.restart()
    view = None
    if args.consolidate:
        from karpy.simulate import consolidate

        view = consolidate.consolidate(manifests, catalogue, preference_policy=args.preference_policy)
        clock.lap("consolidate")
    if args.output == "json":
        document = plan_to_json(plan)
        if view is not None:
            document["consolidation"] = consolidate.view_to_json(view)
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(render_text(plan))
        if view is not None:
            sys.stdout.write(consolidate.render_text(view))
    sys.stdout.flush()
    clock.lap("output")
    if args.timings:
        print(f"karpy simulate timings: {clock.line()}", file=sys.stderr)
    return 0


class _PhaseClock:
    """Seconds per phase of ``karpy simulate`` (``--timings``); ``simulate`` adds its own phases to ``phases``."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.origin = self.mark = time.perf_counter()

    def lap(self, name: str) -> None:
        """Charge the time since the last lap (or restart) to ``name``."""
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.mark
        self.mark = now

    def restart(self) -> None:
        """Start the next lap now (the phases in between were timed by someone else)."""
        self.mark = time.perf_counter()

    def line(self) -> str:
        """``phase=seconds`` pairs, in order, then ``total``."""
        pairs = [f"{k}={v:.3f}" for k, v in self.phases.items()]
        return " ".join([*pairs, f"total={time.perf_counter() - self.origin:.3f}"])


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run; on invalid settings or input, or when a start-up check fails, one line on
    stderr naming the variable and a non-zero exit code: 2 invalid settings or input or a failed check (a port in
    use, a missing interruption queue), 3 no usable kubeconfig, 4 apiserver unreachable, 5 credentials refused
    (:mod:`karpy.cli.startup`); 1 when the leader lost its lease (controller-runtime's manager exits too; the
    process restarts as a standby)."""
    parser = argparse.ArgumentParser(prog="karpy", description="Just-in-time nodes for Kubernetes on AWS.")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser(
        "run",
        help="run the controller (settings from environment variables or flags)",
        description="Run the controller. Every Karpenter setting is an environment variable and a flag of the same "
        "name (CLUSTER_NAME, --cluster-name); a flag wins. Exit codes: 0 stopped, 1 leader election lost, "
        "2 invalid settings or a failed start-up check, 3 no usable kubeconfig, 4 apiserver unreachable, "
        "5 credentials refused by the apiserver.",
    )
    add_setting_flags(run_parser)
    _add_simulate(sub)
    if (sys.argv[1:] if argv is None else argv)[:1] != ["simulate"]:
        # ``karpy simulate`` skips explain's parser: it would import the cluster client (aiohttp, 0.3 s).
        from karpy.cli.explain import add_explain

        add_explain(sub)
    args = parser.parse_args(argv)
    if args.command == "simulate":
        return simulate_command(args)
    if args.command == "explain":
        from karpy.cli.explain import explain_command

        return explain_command(args)
    if args.command == "run":
        try:
            settings = from_environment(environment_with_flags(args, os.environ))
        except UnsupportedSetting as err:  # a valid Karpenter value karpy cannot honour
            print(f"karpy: unsupported setting: {err}", file=sys.stderr)
            return 2
        except SettingsError as err:
            print(f"karpy: invalid settings: {err}", file=sys.stderr)
            return 2
        try:
            logs.configure(settings.log_level, settings.log_output_paths, settings.log_error_output_paths)
        except OSError as err:
            paths = ",".join(settings.log_output_paths + settings.log_error_output_paths)
            print(f"karpy: cannot start: LOG_OUTPUT_PATHS/LOG_ERROR_OUTPUT_PATHS={paths}: {err}", file=sys.stderr)
            return 2
        from karpy.operator import run
        from karpy.runtime.leader import LeaderElectionLost

        try:
            import uvloop

            uvloop.install()
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            pass
        try:
            asyncio.run(run(settings))
        except StartupError as err:  # one line naming the variable, not a traceback; the code says which kind
            print(startup.message(err), file=sys.stderr)
            return startup.exit_code(err)
        except LeaderElectionLost:  # logged once ("leader election lost"); the kubelet restarts the process
            return startup.EXIT_LEADER_ELECTION_LOST
        return 0
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
