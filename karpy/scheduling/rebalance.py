"""Re-pairing interchangeable pods with NodeClaims after placement, so that each NodeClaim's cheapest type shrinks.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, pods queued by ``queue.go``
largest cpu first, each to the open NodeClaim with the fewest pods) decides which NodeClaim gets which pod by
arrival order, not by fit. With required hostname anti-affinity (one pod of a set per node) that pairs a
memory-heavy set member with a NodeClaim already memory-heavy and a cpu-heavy one with a cpu-heavy NodeClaim,
and both launch a larger type than the pair needed. karpy re-deals such pods afterwards; Karpenter has no
counterpart (it leaves this to consolidation, after launch).

A *class* is a set of pods identical in everything but their requests (namespace, labels, node selection,
tolerations, priority, pod (anti-)affinity, topology spread; no host ports, volumes or preferred terms). Every
topology count and requirement of a NodeClaim depends only on that, so exchanging two pods of one class between
NodeClaims of one NodePool keeps every constraint the plan met; only the NodeClaims' summed requests change.
Among the NodeClaims holding exactly one pod of a class, the pods are re-paired: NodeClaims sorted from
the most cpu-heavy rest (requests without that pod) to the most memory-heavy, pods from the most memory-heavy
to the most cpu-heavy (shares of the NodePool's largest type), then neighbouring pairs swapped while that is
cheaper. The new pairing replaces the old only when its cheapest fitting types cost less in total.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from karpy.scheduling.model import Pod
from karpy.scheduling.nodeclaim import Claim, claim_fit, movable_claim
from karpy.scheduling.queue import Group
from karpy.scheduling.state import SolveState


def class_key(pod: Pod) -> tuple[object, ...] | None:
    """What makes two pods interchangeable between NodeClaims (None: never exchanged)."""
    if pod.host_ports or pod.volume_claims or pod.volume_terms or pod.preferred_terms:
        return None
    if pod.preferred_pod_affinity or pod.preferred_pod_anti_affinity:
        return None
    if any(t.when_unsatisfiable != "DoNotSchedule" for t in pod.topology_spread):
        return None  # ScheduleAnyway constraints may have been relaxed per pod
    return (
        pod.namespace,
        tuple(sorted(pod.labels.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.required_terms,
        pod.tolerations,
        pod.priority,
        pod.owner,
        pod.pod_affinity,
        pod.pod_anti_affinity,
        pod.topology_spread,
    )


def rebalance(s: SolveState) -> None:
    """Re-pair the pods of each class held one per NodeClaim with those NodeClaims when that is cheaper."""
    cpu, mem = s.res_pos.get("cpu"), s.res_pos.get("memory")
    if cpu is None or mem is None:
        return
    seats: dict[tuple[int, tuple[object, ...]], list[tuple[Claim, Group, Pod]]] = {}
    for claim in s.claims:
        if not movable_claim(claim):
            continue
        held: dict[tuple[object, ...], list[tuple[Group, Pod]]] = {}
        for g, pods in claim.batches:
            for pod in pods:
                key = class_key(pod)
                if key is not None:
                    held.setdefault(key, []).append((g, pod))
        for key, found in held.items():
            if len(found) == 1:
                seats.setdefault((claim.table.order, key), []).append((claim, *found[0]))
    biggest: dict[int, list[int]] = {}
    for members in seats.values():
        if len({g.vec for _, g, _ in members}) > 1:
            table = members[0][0].table
            top = biggest.get(table.order)
            if top is None:
                top = biggest[table.order] = [max((a[i] for a in table.avail), default=0) for i in range(len(s.index))]
            if top[cpu] > 0 and top[mem] > 0:
                _repair(s, members, cpu, mem, top)


def _repair(s: SolveState, members: list[tuple[Claim, Group, Pod]], cpu: int, mem: int, biggest: Sequence[int]) -> None:
    dims = range(len(biggest))

    def lean(vec: Sequence[int]) -> float:
        return vec[cpu] / biggest[cpu] - vec[mem] / biggest[mem]

    rests = [[c.used[i] - g.vec[i] for i in dims] for c, g, _ in members]
    seats = sorted(range(len(members)), key=lambda k: -lean(rests[k]))
    pods = sorted(range(len(members)), key=lambda k: lean(members[k][1].vec))
    given = dict(zip(seats, pods, strict=True))

    known: dict[tuple[int, int], float] = {}

    def cost(seat: int, pod: int) -> float:
        hit = known.get((seat, pod))
        if hit is None:
            vec = members[pod][1].vec
            hit = known[seat, pod] = claim_fit(
                members[seat][0], [r + v for r, v in zip(rests[seat], vec, strict=True)]
            )[0]
        return hit

    for a, b in pairwise(seats):  # neighbouring NodeClaims try their pods swapped
        pa, pb = given[a], given[b]
        if cost(a, pb) + cost(b, pa) < cost(a, pa) + cost(b, pb):
            given[a], given[b] = pb, pa
    before = sum(cost(k, k) for k in range(len(members)))
    after = sum(cost(seat, pod) for seat, pod in given.items())
    if after >= before * (1 - 1e-9):
        return
    for seat, pod in given.items():
        if seat != pod:
            _replace(members[seat][0], members[seat][2], members[pod][1], members[pod][2], rests[seat])


def _replace(claim: Claim, old: Pod, g: Group, new: Pod, rest: list[int]) -> None:
    """Swap ``old`` for ``new`` (of group ``g``) on ``claim``, whose requests without ``old`` are ``rest``."""
    claim.pods = [new if p is old else p for p in claim.pods]
    batches: list[tuple[Group, list[Pod]]] = []
    for group, pods in claim.batches:
        kept = [p for p in pods if p is not old]
        if kept:
            batches.append((group, kept))
    batches.append((g, [new]))
    claim.batches = batches
    claim.used = [r + v for r, v in zip(rest, g.vec, strict=True)]
