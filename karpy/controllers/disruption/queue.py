"""The orchestration queue: carries out one disruption command at a time per candidate set, in the background
(Karpenter core ``pkg/controllers/disruption/queue.go``).

A command taints its nodes ``karpenter.sh/disrupted:NoSchedule``, then re-reads each Node and its pods from
the apiserver — not the informer cache — and aborts on a ``do-not-disrupt`` pod or node, or on pods that
arrived since the decision (core#3185, core#3111); sets ``DisruptionReason``; creates the replacement
NodeClaims through the provisioner's ``nodeclaim_from_plan`` and waits until every one is Initialized
(events ``DisruptionLaunching``, ``DisruptionWaitingReadiness``); only then deletes the candidate NodeClaims
with the decision record (annotation ``karpy.sh/disruption-decision`` and event ``DisruptionTerminating``).

A replacement that disappears, or does not initialize within ``replacement_timeout``, abandons the command:
the replacements are deleted, the taint and condition removed, the candidates back off (30 s doubling to
10 min), and on a timeout of a drift command the NodePool's drift is halted (karpy's circuit breaker, see
:mod:`.controls`). The queue only ever deletes NodeClaims; the terminator drains and terminates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, set_condition
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.times import now_rfc3339
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.candidates import do_not_disrupt_blocker
from karpy.controllers.disruption.helpers import (
    Clock,
    Sleep,
    delete_claim,
    eventual_ignores_pods,
    patch_conditions,
    untaint,
    workload,
)
from karpy.controllers.disruption.types import DRIFTED, EMPTY, Candidate, Command
from karpy.controllers.provisioner import nodeclaim_from_plan
from karpy.controllers.terminator import drainable
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import NORMAL, WARNING, EventRecorder
from karpy.kube.resources import NODECLAIMS, NODEPOOLS, NODES, PODS
from karpy.metrics import DISRUPTION_DECISIONS, DISRUPTION_QUEUE_FAILURES, NODECLAIMS_CREATED, NODECLAIMS_DISRUPTED
from karpy.runtime.fence import NotLeader
from karpy.scheduling import model
from karpy.state.cluster import ClusterState
from karpy.state.views import pod_info

log = structlog.get_logger("karpy.disruption")
BACKOFF_INITIAL = 30.0
BACKOFF_MAX = 600.0
REPLACEMENT_POLL = 1.0


class Queue:
    """Commands in flight, and what they leave behind for the next evaluation.

    Attributes:
        in_flight: candidate NodeClaim names of running commands (they count as disrupting for budgets).
        replacing: replacement NodeClaim names not yet handed over (never candidates themselves).
        tasks: the running commands.
        backoff: NodeClaim name → (not before, next delay) in seconds: a candidate whose command was abandoned
            waits before it is tried again (30 s, doubling to 10 min), so a failing launch is not retried every
            pass.
        disrupted_workloads: workload key (see :func:`.helpers.workload`) → when a command moved its pods
            (seconds since the epoch), for karpy's cooldown.
    """

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        settings: controls.DisruptionSettings,
        *,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.settings = settings
        self.clock = clock
        self.sleep = sleep
        self.in_flight: set[str] = set()
        self.replacing: set[str] = set()
        self.tasks: set[asyncio.Task[bool]] = set()
        self.backoff: dict[str, tuple[float, float]] = {}
        self.disrupted_workloads: dict[str, float] = {}

    async def run(self) -> None:
        """The queue's lifetime: wait until cancelled, then cancel the commands in flight (their taints and
        conditions are cleared by the next start, see ``Disruption.clear_leftovers``)."""
        try:
            await asyncio.Event().wait()
        finally:
            for task in list(self.tasks):
                task.cancel()

    def start(self, command: Command) -> asyncio.Task[bool]:
        """Run ``command`` in the background; its candidates count as disrupting until it ends."""
        self.in_flight.update(c.name for c in command.candidates)
        task = asyncio.get_running_loop().create_task(self.execute(command))
        self.tasks.add(task)

        def done(t: asyncio.Task[bool]) -> None:
            self.tasks.discard(t)
            self.in_flight.difference_update(c.name for c in command.candidates)

        task.add_done_callback(done)
        return task

    async def execute(self, command: Command) -> bool:
        """Taint, re-check fresh, launch replacements, wait for them, delete the candidates; True on success,
        False when the command was abandoned (undone; see the module docstring)."""
        labels = {"decision": command.decision, "reason": command.reason, "consolidation_type": command.method}
        tainted: list[str] = []
        created: list[str] = []
        try:
            command = await self._taint_all(command, tainted)
            await self._set_reason(command, True)
            for plan in command.replacements:
                created.append(await self._create_replacement(plan, command))
            await self._await_initialized(created, command)
        except _Abort as abort:
            await self._abandon(command, tainted, created, abort)
            DISRUPTION_QUEUE_FAILURES.labels(**labels).inc()
            return False
        except NotLeader as err:
            # The leader fence refused a write: this process is exiting. Undoing would be refused too, and the
            # next leader clears the leftover taint and condition (Disruption.clear_leftovers) and re-decides;
            # the candidates are not backed off and no failure is counted.
            log.info("disruption command stopped: not the leader", refused=err.action, command=command.record())
            return False
        except Exception as err:  # the command is a background task: undo it and report, never leak it half-done
            log.exception("disruption command failed", command=command.record())
            await self._abandon(command, tainted, created, _Abort(f"error: {err}", halt=False))
            DISRUPTION_QUEUE_FAILURES.labels(**labels).inc()
            return False
        finally:
            self.replacing.difference_update(created)
        now = self.clock()
        for c in command.candidates:
            if await delete_claim(self.client, self.state, self.events, c.claim, command.record(), command.reason):
                NODECLAIMS_DISRUPTED.labels(reason=command.reason.lower(), nodepool=c.pool).inc()
            for p in c.pods:
                self.disrupted_workloads[workload(p.pod)] = now
        DISRUPTION_DECISIONS.labels(**labels).inc()
        log.info("disruption command done", command=command.record())
        return True

    async def _taint_all(self, command: Command, tainted: list[str]) -> Command:
        """Taint and re-check every candidate (appending each tainted Node to ``tainted``); the command with
        the candidates that may still go. Raises :class:`_Abort` when none may."""
        kept: list[Candidate] = []
        for c in command.candidates:
            tainted.append(c.node.name)  # before the patch: an error after it must still untaint
            blocker = await self._taint_and_recheck(c, command)
            if not blocker:
                kept.append(c)
            elif command.reason == EMPTY and len(command.candidates) > 1:
                # Each empty node stands alone: one that gained a pod leaves the command, the rest still go.
                await self._drop(c, command, blocker)
                tainted.remove(c.node.name)
            else:
                raise _Abort(blocker, halt=False)
        if not kept:
            raise _Abort("every candidate gained pods since the decision", halt=False)
        return attrs.evolve(command, candidates=tuple(kept))

    async def _taint_and_recheck(self, c: Candidate, command: Command) -> str:
        """Taint the Node, then re-read it and its pods from the apiserver: why to abort ("" to go on)."""
        node = await self.client.get(NODES, c.node.name)
        meta = node.get("metadata") or {}
        taints = list((node.get("spec") or {}).get("taints") or [])
        if not any(t.get("key") == wk.TAINT_DISRUPTED_KEY for t in taints):
            taints.append({"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"})
            node = await self.client.merge_patch(
                NODES,
                c.node.name,
                {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": {"taints": taints}},
            )
            self.state.apply("Node", "MODIFIED", node)
        try:
            claim = NodeClaim.from_json(await self.client.get(NODECLAIMS, c.name))
        except ApiError as err:
            if err.not_found:
                return "nodeclaim is gone"
            raise
        if claim.deleting:
            return "nodeclaim is already being deleted"
        pods, _ = await self.client.list(PODS, query={"fieldSelector": f"spec.nodeName={c.node.name}"})
        infos = [pod_info(p) for p in pods]
        blocker = do_not_disrupt_blocker(claim, (node.get("metadata") or {}).get("annotations") or {}, infos)
        if blocker and not eventual_ignores_pods(c.claim):
            return blocker
        if command.validate:
            known = {p.key for p in c.pods}
            arrived = [i.key for i in infos if drainable(i) and not i.deleting and i.key not in known]
            if arrived:
                return f"pods arrived since the decision: {', '.join(arrived[:3])}"
        return ""

    def back_off(self, name: str) -> None:
        """Hold NodeClaim ``name`` back from disruption: 30 s after a first failure, doubling to 10 min."""
        delay = min(self.backoff.get(name, (0.0, BACKOFF_INITIAL / 2))[1] * 2, BACKOFF_MAX)
        self.backoff[name] = (self.clock() + delay, delay)

    async def _drop(self, c: Candidate, command: Command, blocker: str) -> None:
        """Take one candidate out of an emptiness command: untaint it, say why, back it off like an abandon."""
        log.info("candidate left the command", nodeclaim=c.name, reason=blocker, command=command.method)
        await untaint(self.client, self.state, c.node.name)
        self.events.publish(c.claim.raw, WARNING, "DisruptionBlocked", f"{command.reason}: {blocker}")
        self.back_off(c.name)

    async def _set_reason(self, command: Command, on: bool) -> None:
        """``DisruptionReason`` on each candidate NodeClaim (Karpenter v1), or its removal on abort."""
        for c in command.candidates:
            claim = self.state.nodeclaim_view(c.name)
            if claim is None:
                continue
            conditions = conditions_json(claim.raw)
            if on:
                message = json.dumps(command.record(), sort_keys=True)[:1000]
                conditions = set_condition(conditions, wk.COND_DISRUPTION_REASON, "True", command.reason, message)
            else:
                conditions = [x for x in conditions if x.get("type") != wk.COND_DISRUPTION_REASON]
            await patch_conditions(self.client, self.state, c.name, conditions, claim)

    async def _create_replacement(self, plan: model.NewNodeClaim, command: Command) -> str:
        nodepool = self.state.nodepool_view(plan.nodepool)
        if nodepool is None:
            raise _Abort(f"NodePool {plan.nodepool} is gone", halt=False)
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        nodeclass_raw = nodeclass.raw if nodeclass is not None else None
        body = nodeclaim_from_plan(plan, nodepool.raw, nodeclass_raw, ca_bundle=self.settings.ca_bundle)
        body["metadata"]["annotations"][controls.ANNOTATION_DECISION] = json.dumps(
            {**command.record(), "replacementFor": [c.name for c in command.candidates]}, sort_keys=True
        )
        try:
            created = await self.client.create(NODECLAIMS, body)
        except ApiError as err:
            raise _Abort(f"replacement not created: {err.message}", halt=False) from err
        name = str(created["metadata"]["name"])
        self.replacing.add(name)
        self.state.apply("NodeClaim", "ADDED", created)
        NODECLAIMS_CREATED.labels(nodepool=plan.nodepool, reason=command.reason.lower()).inc()
        for c in command.candidates:
            self.events.publish(
                c.claim.raw, NORMAL, "DisruptionLaunching", f"Launching NodeClaim {name}: {command.reason}"
            )
        log.info("launched replacement", nodeclaim=name, command=command.method, reason=command.reason)
        return name

    async def _await_initialized(self, names: Sequence[str], command: Command) -> None:
        """Until every replacement is Initialized, checked every ``REPLACEMENT_POLL`` seconds; raises
        :class:`_Abort` on ``replacement_timeout`` (with ``halt``) or a vanished replacement."""
        deadline = self.clock() + self.settings.replacement_timeout
        announced = False
        while True:
            waiting = []
            for name in names:
                claim = self.state.nodeclaim_view(name)
                if claim is None or claim.deleting:
                    raise _Abort(f"replacement {name} disappeared", halt=False)
                if not claim.is_true(wk.COND_INITIALIZED):
                    waiting.append(name)
            if not waiting:
                return
            if not announced:
                announced = True
                for c in command.candidates:
                    self.events.publish(
                        c.claim.raw,
                        NORMAL,
                        "DisruptionWaitingReadiness",
                        f"Waiting on readiness of {', '.join(waiting)}",
                    )
            if self.clock() >= deadline:
                limit = self.settings.replacement_timeout
                raise _Abort(f"replacement(s) {', '.join(waiting)} not initialized within {limit:g}s", halt=True)
            await self.sleep(REPLACEMENT_POLL)

    async def _abandon(self, command: Command, tainted: Sequence[str], created: Sequence[str], abort: _Abort) -> None:
        """Undo a command: delete its replacements, untaint, clear the condition; halt drift on a timeout."""
        log.warning("disruption command abandoned", reason=abort.reason, command=command.record())
        for name in created:
            try:
                await self.client.delete(NODECLAIMS, name)
            except ApiError as err:
                if not err.not_found:
                    log.warning("replacement not deleted", nodeclaim=name, error=str(err))
        for node in tainted:
            try:
                await untaint(self.client, self.state, node)
            except ApiError as err:
                log.warning("disrupted taint not removed", node=node, error=str(err))
        try:
            await self._set_reason(command, False)
        except ApiError as err:
            log.warning("disruption reason not cleared", error=str(err))
        for c in command.candidates:
            self.events.publish(c.claim.raw, WARNING, "DisruptionBlocked", f"{command.reason}: {abort.reason}")
            self.back_off(c.name)
        if abort.halt and command.reason == DRIFTED:
            for pool in {c.pool for c in command.candidates}:
                await self.halt_drift(pool, abort.reason)

    async def halt_drift(self, pool: str, reason: str) -> None:
        """Trip the drift circuit breaker for ``pool`` (annotation ``karpy.sh/drift-halted`` and an event)."""
        nodepool = self.state.nodepool_view(pool)
        if nodepool is None:
            return
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        record = controls.halt_record(
            reason,
            nodepool_hash(nodepool.raw),
            nodeclass_hash(nodeclass.raw if nodeclass is not None else {}, self.settings.ca_bundle),
            now_rfc3339(),
        )
        try:
            updated = await self.client.merge_patch(
                NODEPOOLS, pool, {"metadata": {"annotations": {controls.ANNOTATION_DRIFT_HALTED: record}}}
            )
        except ApiError as err:
            log.warning("drift halt not recorded", nodepool=pool, error=str(err))
            return
        self.state.apply("NodePool", "MODIFIED", updated)
        self.events.publish(updated, WARNING, "DisruptionHalted", f"Drift halted: {reason}")
        log.warning("drift halted", nodepool=pool, reason=reason)


class _Abort(Exception):
    """A command cannot go on; ``halt``: a replacement failed to initialize (trips the drift breaker)."""

    def __init__(self, reason: str, *, halt: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.halt = halt
