"""``make chaos``: karpy SIGKILLed at random moments of random scale-ups and scale-downs, invariants checked.

``python -m e2e.chaos [--rounds N] [--seed S]`` starts the local cluster (control plane + KWOK + moto + node
agent) in ``.e2e-run/chaos-<seed>``, runs karpy as its ServiceAccount, applies the Karpenter user's NodePool and
EC2NodeClass of ``e2e/manifests`` (``consolidateAfter`` shortened to 5 s so scale-downs disrupt within a round)
and a Deployment of small pods. Each round:

1. scales the Deployment to a random replica count in 0..``--max-replicas`` other than the current one;
2. SIGKILLs karpy at a random moment and starts it again. Half the rounds kill after a random delay (up to
   2.5 s after a scale-up, up to 12 s after a scale-down); the other half wait for karpy to log a randomly
   chosen step of the work the scale causes (a NodeClaim created, launched, registered, a pod bound; a
   NodeClaim disrupted, its node tainted, its instance terminating, its finalizer released) and kill 0–300 ms
   after it, so kills land inside launches, binds and disruption commands, not only between them;
3. waits until the cluster settled — the restarted karpy synced, every pod Running, no NodeClaim/Node/Pod being
   deleted, every NodeClaim Ready and Consolidatable (consolidateAfter passed), no node of karpy's left empty,
   the invariants clean, and then a disruption evaluation that found nothing to do (converged per the NodePool's
   consolidation) — or until ``--settle-timeout`` seconds;
4. checks :func:`e2e.helpers.cluster_invariants` throughout: leaks, double launches, orphans (a violation counts
   once it has persisted ``--grace`` seconds, the time Karpenter's garbage collection needs to repair it) and
   stuck objects (a ``deletionTimestamp`` older than 60 s).

One line per round, then a table (rounds, kills, leaks, double launches, orphans, stuck, unsettled rounds,
settle time p50/p95/max measured from the scale command). Exits 1 if any count is non-zero. Everything runs on
loopback; every loop is bounded (``--max-minutes`` ends the run early, reporting the rounds done). Logs: the
run's workdir (``karpy.log``, ``cluster.log``, ``logs/``) and ``results.json`` there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from e2e.helpers import (
    LIVE_INSTANCE_STATES,
    ROOT,
    Invariants,
    KarpyProcess,
    apply,
    aws_client,
    cluster_instances,
    cluster_invariants,
    free_port,
    karpy_process,
    load_documents,
    run_tagged_instance,
    scale,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

CLUSTER = "karpy-chaos"
APP = "chaos"
SELF_CHECK_CLAIM = "chaos-self-check"  # the NodeClaim name the self-check's hand-launched instances carry
SELF_CHECK_KEY = f"nodeclaim/{SELF_CHECK_CLAIM}"
CATEGORIES = ("leaks", "double_launches", "orphan_nodes", "orphan_nodeclaims", "stuck")
# karpy's knobs for a short round: evaluate disruption every 2 s and re-validate after 2 s (Karpenter: 10 s, 15 s).
# Seconds after the scale command within which karpy is killed: a synced karpy creates, launches and binds within
# ~2 s of a scale-up; after a scale-down it disrupts after consolidateAfter (5 s) + a poll (2 s) + validation (2 s).
UP_KILL_WINDOW = 2.5
DOWN_KILL_WINDOW = 12.0
# The steps an event-triggered kill waits for (karpy's log messages), after a scale-up and after a scale-down.
UP_STEPS = ("created nodeclaim", "launched nodeclaim", "registered nodeclaim", "bound pod")
DOWN_STEPS = ("disrupting nodeclaim", "tainted node", "terminating instance", "terminated nodeclaim")
ACTIVITY = {
    "created nodeclaim": "created",
    "launched nodeclaim": "launched",
    "registered nodeclaim": "registered",
    "initialized nodeclaim": "initialized",
    "bound pod": "bound",
    "disrupting nodeclaim": "disrupting",
    "tainted node": "tainted",
    "terminating instance": "terminating",
    "terminated nodeclaim": "released",
}
KARPY_SETTINGS = {"DISRUPTION_POLL_INTERVAL": "2s", "DISRUPTION_VALIDATION_DELAY": "2s"}


def say(text: str) -> None:
    """One line with a clock."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def manifests() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The user's NodePool + EC2NodeClass (consolidateAfter 5 s) and the ``chaos`` Deployment (0.5 CPU, 512Mi)."""
    text = (ROOT / "e2e" / "manifests" / "nodepool.yaml").read_text().replace("${CLUSTER_NAME}", CLUSTER)
    pool = [d for d in yaml.safe_load_all(text) if d]
    for doc in pool:
        if doc["kind"] == "NodePool":
            doc["spec"]["disruption"]["consolidateAfter"] = "5s"
    (deploy,) = load_documents(ROOT / "e2e" / "manifests" / "inflate.yaml")
    deploy["metadata"]["name"] = APP
    deploy["spec"]["selector"]["matchLabels"] = {"app": APP}
    template = deploy["spec"]["template"]
    template["metadata"]["labels"] = {"app": APP}
    template["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m", "memory": "512Mi"}
    return pool, [deploy]


@dataclass
class Tracker:
    """Violations across the run: when each key was first seen, and the ones that persisted past the grace."""

    grace: float
    first_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    counted: dict[tuple[str, str], int] = field(default_factory=dict)  # (category, key) → round found
    details: dict[tuple[str, str], str] = field(default_factory=dict)
    excluded: set[str] = field(default_factory=lambda: {SELF_CHECK_KEY})  # the self-check's own instances

    def observe(self, inv: Invariants, round_no: int, now: float) -> list[tuple[str, str]]:
        """Record a snapshot; the violations not counted yet that are still within their grace (pending)."""
        seen = {(cat, key) for cat in CATEGORIES for key in getattr(inv, cat) if key not in self.excluded}
        for gone in set(self.first_seen) - seen:
            del self.first_seen[gone]
        pending = []
        for item in sorted(seen):
            if item in self.counted:
                continue
            first = self.first_seen.setdefault(item, now)
            # Stuck and double launches are violations the moment they are seen (their own age is in them).
            if item[0] in ("stuck", "double_launches") or now - first >= self.grace:
                self.counted[item] = round_no
                self.details[item] = inv.details.get(item[1], "")
                say(f"  VIOLATION round {round_no}: {item[0]} {item[1]} {self.details[item]}")
            else:
                pending.append(item)
        return pending

    def count(self, category: str) -> int:
        return sum(1 for cat, _ in self.counted if cat == category)

    def keys(self) -> set[str]:
        return {key for _, key in self.counted}


@dataclass
class Round:
    """One round's figures."""

    number: int
    before: int
    target: int
    kill_after: float
    settle: float | None = None
    claims: int = 0
    instances: int = 0
    unsettled_reason: str = ""
    interrupted: str = ""  # what karpy logged between the scale and the kill
    trigger: str = ""  # the step an event-triggered kill waited for


class Chaos:
    """The cluster, karpy and the rounds."""

    def __init__(self, client: KubeClient, karpy: KarpyProcess, ec2: Any, args: argparse.Namespace) -> None:
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2
        self.args = args
        self.rng = random.Random(args.seed)
        self.tracker = Tracker(args.grace)
        self.rounds: list[Round] = []
        self.kills = 0
        self.crashes = 0  # karpy found dead without being killed
        self.replicas = 0

    async def unsettled(self, target: int) -> str:
        """Why the workload has not settled ("" once it has); objects already counted as stuck are ignored."""
        ignore = self.tracker.keys()
        pods = (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={APP}"}))[0]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        deleting = [
            p
            for p in pods
            if p["metadata"].get("deletionTimestamp") and f"pod/default/{p['metadata']['name']}" not in ignore
        ]
        if len(live) != target or deleting:
            return f"{len(live)}/{target} pods (+{len(deleting)} deleting)"
        running = sum(1 for p in live if p["status"].get("phase") == "Running")
        if running != target:
            return f"{running}/{target} pods Running"
        claims = [
            c for c in (await self.client.list(r.NODECLAIMS))[0] if f"nodeclaim/{c['metadata']['name']}" not in ignore
        ]
        gone = [c["metadata"]["name"] for c in claims if c["metadata"].get("deletionTimestamp")]
        if gone:
            return f"nodeclaims deleting: {','.join(gone)}"
        not_ready = [c["metadata"]["name"] for c in claims if not _condition(c, "Ready")]
        if not_ready:
            return f"nodeclaims not Ready: {','.join(not_ready)}"
        # Consolidatable: consolidateAfter has passed since the node's last pod change, so the next disruption
        # evaluation judges the cluster as it settled (not a node whose pods just left).
        waiting = [c["metadata"]["name"] for c in claims if not _condition(c, "Consolidatable")]
        if waiting:
            return f"nodeclaims not Consolidatable yet: {','.join(waiting)}"
        used = {p["spec"].get("nodeName") for p in live}
        empty = [c["status"].get("nodeName") for c in claims if c["status"].get("nodeName") not in used]
        if empty:
            return f"empty nodes: {','.join(empty)}"
        nodes = [n for n in (await self.client.list(r.NODES))[0] if f"node/{n['metadata']['name']}" not in ignore]
        if len(nodes) != len(claims):
            return f"{len(nodes)} nodes for {len(claims)} nodeclaims"
        return ""

    async def one_round(self, number: int) -> Round:
        """Scale, kill at a random moment, restart, wait for the cluster to settle while checking invariants."""
        target = self.rng.choice([n for n in range(self.args.max_replicas + 1) if n != self.replicas])
        up = target > self.replicas
        window = UP_KILL_WINDOW if up else DOWN_KILL_WINDOW
        step = self.rng.choice(UP_STEPS if up else DOWN_STEPS) if self.rng.random() < 0.5 else ""
        delay = self.rng.uniform(0, 0.3) if step else self.rng.uniform(0, window)
        rnd = Round(number, self.replicas, target, delay)
        if not self.karpy.alive:
            self.crashes += 1
            say(f"  karpy had exited by itself before round {number}; restarting (see {self.karpy.log_path})")
            self.karpy.start()
        at_scale = log_size(self.karpy)
        started = time.monotonic()
        await scale(self.client, APP, target)
        self.replicas = target
        if step:
            rnd.trigger = await self.wait_for_step(step, at_scale, started + window + 5.0)
        await asyncio.sleep(delay)
        rnd.kill_after = time.monotonic() - started
        self.karpy.kill()
        self.kills += 1
        rnd.interrupted = activity(log_lines(self.karpy, at_scale))
        await asyncio.sleep(self.rng.uniform(0, 1.0))
        at_restart = log_size(self.karpy)
        self.karpy.start()
        deadline = started + self.args.settle_timeout
        converging_from: int | None = None  # karpy log offset once everything else settled
        while True:
            now = time.monotonic()
            inv = await cluster_invariants(self.client, self.ec2, CLUSTER, pod_namespace="default")
            pending = self.tracker.observe(inv, number, now)
            reason = await self.unsettled(target)
            if not reason and pending:
                reason = "pending " + ", ".join(f"{c} {k}" for c, k in pending)
            if not reason and not any(
                line.get("message") == "cluster state synced" for line in log_lines(self.karpy, at_restart)
            ):
                reason = "restarted karpy not synced"
            if reason:
                converging_from = None
            elif converging_from is None:
                converging_from = log_size(self.karpy)
                reason = "waiting for a disruption evaluation"
            elif not any(converged(line) for line in log_lines(self.karpy, converging_from)):
                reason = "waiting for a disruption evaluation without command"
            else:
                rnd.settle = now - started
                break
            if now > deadline:
                rnd.unsettled_reason = reason
                break
            if not self.karpy.alive:
                self.crashes += 1
                say(f"  karpy exited by itself in round {number}; restarting (see {self.karpy.log_path})")
                self.karpy.start()
            await asyncio.sleep(1.0)
        rnd.claims = len((await self.client.list(r.NODECLAIMS))[0])
        rnd.instances = await self._live_instances()
        return rnd

    async def wait_for_step(self, step: str, offset: int, deadline: float) -> str:
        """Wait (polling karpy's log every 50 ms, until ``deadline``) for the message ``step``; what to print."""
        while time.monotonic() < deadline:
            if any(line.get("message") == step for line in log_lines(self.karpy, offset)):
                return f"after {ACTIVITY[step]}"
            await asyncio.sleep(0.05)
        return f"{ACTIVITY[step]} not seen"

    async def _live_instances(self) -> int:
        instances = await asyncio.to_thread(cluster_instances, self.ec2, CLUSTER)
        return sum(1 for i in instances if i["State"]["Name"] in LIVE_INSTANCE_STATES)

    async def run(self) -> None:
        """All rounds, bounded by ``--max-minutes``."""
        stop_at = time.monotonic() + self.args.max_minutes * 60
        for number in range(1, self.args.rounds + 1):
            if time.monotonic() > stop_at:
                say(f"--max-minutes {self.args.max_minutes} reached after {number - 1} rounds; stopping")
                break
            rnd = await self.one_round(number)
            self.rounds.append(rnd)
            direction = "up  " if rnd.target > rnd.before else "down"
            settled = f"settled {rnd.settle:5.1f}s" if rnd.settle is not None else f"UNSETTLED ({rnd.unsettled_reason})"
            say(
                f"round {number:>3}/{self.args.rounds} {direction} {rnd.before:>2}→{rnd.target:<2} "
                f"kill@{rnd.kill_after:4.1f}s{' ' + rnd.trigger if rnd.trigger else ''} [{rnd.interrupted or 'idle'}] "
                f"{settled} "
                f"nodeclaims={rnd.claims} instances={rnd.instances} violations={len(self.tracker.counted)}"
            )

    def summary(self) -> dict[str, Any]:
        """The final figures."""
        settles = sorted(r.settle for r in self.rounds if r.settle is not None)

        def pct(p: float) -> float | None:
            if not settles:
                return None
            return round(settles[min(len(settles) - 1, int(p * len(settles)))], 1)

        return {
            "seed": self.args.seed,
            "rounds": len(self.rounds),
            "kills": self.kills,
            "karpy_crashes": self.crashes,
            "leaks": self.tracker.count("leaks"),
            "double_launches": self.tracker.count("double_launches"),
            "orphans": self.tracker.count("orphan_nodes") + self.tracker.count("orphan_nodeclaims"),
            "stuck": self.tracker.count("stuck"),
            "unsettled_rounds": sum(1 for r in self.rounds if r.settle is None),
            "settle_p50_s": round(statistics.median(settles), 1) if settles else None,
            "settle_p95_s": pct(0.95),
            "settle_max_s": round(settles[-1], 1) if settles else None,
            "violations": [
                {"round": n, "category": c, "object": k, "detail": self.tracker.details.get((c, k), "")}
                for (c, k), n in sorted(self.tracker.counted.items(), key=lambda kv: kv[1])
            ],
            "unsettled": [{"round": r.number, "reason": r.unsettled_reason} for r in self.rounds if r.settle is None],
        }


def log_size(karpy: KarpyProcess) -> int:
    """Bytes in karpy's log so far (an offset for :func:`log_lines`)."""
    try:
        return karpy.log_path.stat().st_size
    except OSError:
        return 0


def log_lines(karpy: KarpyProcess, offset: int) -> list[dict[str, Any]]:
    """karpy's complete JSON log lines from byte ``offset`` on."""
    try:
        with karpy.log_path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    out = []
    for raw in data.split(b"\n")[:-1]:  # the last piece is empty or a line being written
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def converged(line: dict[str, Any]) -> bool:
    """A disruption evaluation that found nothing to do: the cluster converged per the NodePool's consolidation.

    Candidates it reports as blocked may be ones consolidation found no cheaper option for; the workload checks
    (every NodeClaim Ready, none deleting, no empty node) come first."""
    return line.get("message") == "disruption evaluation" and line.get("command") is None


def activity(lines: list[dict[str, Any]]) -> str:
    """What karpy was doing: its lifecycle messages (counted) in ``lines``, e.g. "launched nodeclaim×2"."""
    counts: dict[str, int] = {}
    for line in lines:
        message = str(line.get("message", ""))
        if message in ACTIVITY:
            counts[message] = counts.get(message, 0) + 1
    return ", ".join(f"{ACTIVITY[m]}×{n}" for m, n in counts.items())


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []
    )


def print_table(s: dict[str, Any], elapsed: float) -> None:
    """The final table."""
    rows = [
        ("rounds", s["rounds"]),
        ("kills (SIGKILL)", s["kills"]),
        ("karpy crashes (not killed)", s["karpy_crashes"]),
        ("leaks", s["leaks"]),
        ("double launches", s["double_launches"]),
        ("orphans", s["orphans"]),
        ("stuck", s["stuck"]),
        ("unsettled rounds", s["unsettled_rounds"]),
        ("settle p50 (s)", s["settle_p50_s"]),
        ("settle p95 (s)", s["settle_p95_s"]),
        ("settle max (s)", s["settle_max_s"]),
        ("wall time (s)", round(elapsed)),
    ]
    print("\n" + "\n".join(f"  {name:<28} {value}" for name, value in rows), flush=True)
    for v in s["violations"]:
        print(f"  violation round {v['round']}: {v['category']} {v['object']} {v['detail']}")
    for u in s["unsettled"]:
        print(f"  unsettled round {u['round']}: {u['reason']}")


async def chaos(args: argparse.Namespace) -> int:
    """Start everything, run the rounds, print the table; the exit code. SIGTERM/SIGINT end the run cleanly
    (karpy and the cluster stopped, the table of the rounds done printed)."""
    from e2e.cluster import launcher

    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, task.cancel)

    workdir = ROOT / ".e2e-run" / f"chaos-{args.seed}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    began = time.monotonic()
    say(f"starting the local cluster in {workdir} (seed {args.seed})")
    cluster = launcher.start(workdir, CLUSTER)
    karpy: KarpyProcess | None = None
    client = await KubeClient.from_environment(str(cluster.kubeconfig))
    try:
        karpy = await karpy_process(
            client, cluster.server, CLUSTER, workdir, cluster.aws_env, METRICS_PORT=str(free_port()), **KARPY_SETTINGS
        )
        karpy.start()
        pool, deploy = manifests()
        await apply(client, pool)
        await wait_for(lambda: _ready(client), timeout=60, what="NodePool default Ready")
        await apply(client, deploy)
        say(f"karpy running (logs: {karpy.log_path}); {args.rounds} rounds, up to {args.max_replicas} pods")
        ec2 = aws_client("ec2", cluster.aws_env["AWS_ENDPOINT_URL"])
        await self_check(client, ec2)
        run = Chaos(client, karpy, ec2, args)
        interrupted = False
        try:
            await run.run()
        except asyncio.CancelledError:
            interrupted = True
            say("interrupted; stopping")
        finally:
            summary = run.summary()
            summary["wall_s"] = round(time.monotonic() - began)
            (workdir / "results.json").write_text(json.dumps(summary, indent=2))
            print_table(summary, time.monotonic() - began)
            say(f"results: {workdir / 'results.json'}; karpy log: {karpy.log_path}; cluster logs: {workdir}")
        failing = sum(summary[k] for k in ("leaks", "double_launches", "orphans", "stuck", "unsettled_rounds"))
        if interrupted:
            return 130
        return 1 if failing or summary["karpy_crashes"] else 0
    finally:
        if karpy is not None:
            karpy.stop()
        await client.close()
        cluster.stop()


async def self_check(client: KubeClient, ec2: Any) -> None:
    """The invariant checks can fail: two instances launched by hand, tagged as karpy's for one NodeClaim that
    does not exist, must show as leaks and as a double launch; they are terminated before the rounds start."""
    tags = {wk.cluster_tag(CLUSTER): "owned", wk.TAG_NODEPOOL: "default", wk.TAG_NODECLAIM: SELF_CHECK_CLAIM}
    ids = [run_tagged_instance(ec2, CLUSTER, tags) for _ in range(2)]
    try:
        inv = await cluster_invariants(client, ec2, CLUSTER, launch_grace=0.0)
        assert {f"instance/{i}" for i in ids} <= set(inv.leaks), inv
        assert SELF_CHECK_KEY in inv.double_launches, inv
    finally:
        ec2.terminate_instances(InstanceIds=ids)
    say("self-check: hand-launched leaked/double-launched instances were detected (and terminated)")


async def _ready(client: KubeClient) -> bool:
    return _condition(await client.get(r.NODEPOOLS, "default"), "Ready")


def main() -> None:
    parser = argparse.ArgumentParser(description="karpy SIGKILLed during random scale-ups and scale-downs")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: chosen and printed)")
    parser.add_argument("--max-replicas", type=int, default=30)
    parser.add_argument("--settle-timeout", type=float, default=150.0, help="seconds a round may take to settle")
    parser.add_argument("--grace", type=float, default=90.0, help="seconds a leak/orphan may persist (GC's time)")
    parser.add_argument("--max-minutes", type=float, default=35.0, help="stop starting rounds after this")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    sys.exit(asyncio.run(chaos(args)))


if __name__ == "__main__":
    main()
