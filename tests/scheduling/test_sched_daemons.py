"""Which pod stands for a DaemonSet: its newest live pod, else its template (Karpenter ``getDaemonSetPods``)."""

from __future__ import annotations

import attrs
from sched_builders import daemonset, nodepool, pod, req, res

from karpy.scheduling.daemons import LiveMemo, with_live_pods
from karpy.scheduling.model import HostPort, Pod, Toleration
from karpy.scheduling.scheduler import solve


def live_pod(ds_uid: str, name: str, cpu: str, *, created: float, node: str = "node-1") -> Pod:
    """A pod the DaemonSet controller created: bound to its node, pinned there by a matchFields term that the
    model reads as an empty term, with the controller's tolerations."""
    return attrs.evolve(
        pod(name, cpu=cpu, namespace="kube-system", created=created),
        owner=f"DaemonSet/{ds_uid}",
        node_name=node,
        required_terms=((),),
        tolerations=(Toleration("node.kubernetes.io/not-ready", "Exists", effect="NoExecute"),),
        host_ports=(HostPort(9100),),
    )


def test_the_newest_live_pod_replaces_the_template_but_keeps_its_identity_and_affinity() -> None:
    arm = [[req("kubernetes.io/arch", "In", "arm64")]]
    agent = daemonset("agent", cpu="100m", terms=arm)
    other = daemonset("other", cpu="200m")
    old = live_pod(agent.pod.uid, "agent-old", "300m", created=10.0)
    new = live_pod(agent.pod.uid, "agent-new", "1500m", created=20.0, node="node-2")
    stranger = attrs.evolve(pod("web", cpu="2"), owner="ReplicaSet/rs-1")
    [live_agent, template_other] = with_live_pods([agent, other], [old, new, stranger])
    assert template_other == other, "no live pod: the template stays"
    got = live_agent.pod
    assert got.requests == res("1500m", None) and got.requests == new.requests
    assert got.tolerations == new.tolerations and got.host_ports == new.host_ports
    assert (got.uid, got.namespace, got.name) == (agent.pod.uid, "kube-system", "agent-template")
    assert got.required_terms == agent.pod.required_terms, "the template's required affinity, not the pin"
    assert got.node_name == ""


def test_no_daemonset_pods_leaves_the_templates_alone() -> None:
    agent = daemonset("agent")
    assert with_live_pods([agent], [pod("web")]) == [agent]


def test_the_live_pods_requests_size_the_new_nodeclaim() -> None:
    """A LimitRange gave the DaemonSet's pods 1.5 CPU where the template asks for 100m: a 1-CPU pod then needs
    a 4-CPU type, and the NodeClaim's requests carry the live pod's 1.5 CPU."""
    agent = daemonset("agent", cpu="100m", mem="128Mi")
    live = live_pod(agent.pod.uid, "agent-x", "1500m", created=1.0)
    web = pod("web", cpu="1")
    with_template = solve([web], [nodepool()], [], [agent]).new_nodeclaims[0]
    assert with_template.requests["cpu"] == 1_100
    assert with_template.instance_types[0].name == "c5.large"
    claim = solve([web], [nodepool()], [], with_live_pods([agent], [live])).new_nodeclaims[0]
    assert claim.requests["cpu"] == 2_500
    assert all(it.capacity["cpu"] >= 4_000 for it in claim.instance_types)


def test_the_memo_gives_the_same_object_while_the_daemonset_and_its_live_pod_are_unchanged() -> None:
    """The solve caches allocatable per DaemonSet set by identity: a pass with nothing changed must hand it the
    same objects, a changed live pod a new one, and a DaemonSet gone leaves the memo."""
    agent = daemonset("agent", cpu="100m")
    other = daemonset("other", cpu="200m")
    live = live_pod(agent.pod.uid, "agent-x", "300m", created=1.0)
    other_live = live_pod(other.pod.uid, "other-x", "400m", created=1.0)
    memo: LiveMemo = {}
    first = with_live_pods([agent, other], [live, other_live], memo)
    again = with_live_pods([agent, other], [live, other_live], memo)
    assert all(a is b for a, b in zip(first, again, strict=True))
    newer = live_pod(agent.pod.uid, "agent-y", "700m", created=2.0)
    changed = with_live_pods([agent], [live, newer], memo)
    assert changed[0] is not first[0] and changed[0].pod.requests == newer.requests
    assert set(memo) == {agent.pod.uid}, "the DaemonSet not passed is dropped"
    assert with_live_pods([agent], [live, newer]) == changed, "without a memo: the same value"
