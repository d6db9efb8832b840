"""NodeOverlay: the typed view, validation, price forms, selection, weights, conflicts and application (pure).

Karpenter core v1.15 ``pkg/apis/v1alpha1/nodeoverlay*.go``, ``pkg/controllers/nodeoverlay/{controller,store}.go``,
``pkg/cloudprovider/types.go`` ``AdjustedPrice``.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import nodeoverlay as api
from karpy.apis.nodeoverlay import NodeOverlay, adjusted_price, order_by_weight, validate
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.nodeoverlay import OverlayStore, PoolTypes, evaluate, overlay_annotations

GiB = 2**30


def overlay(name: str, *, weight: int | None = None, reqs: list[Any] | None = None, **spec: Any) -> NodeOverlay:
    body: dict[str, Any] = {"requirements": reqs or [], **spec}
    if weight is not None:
        body["weight"] = weight
    return NodeOverlay.from_json({"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": body})


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def itype(name: str, family: str, od: float, spot: float | None = None) -> InstanceType:
    offerings = [Offering(z, "on-demand", od, zone_id=f"id-{z}") for z in ("us-east-1a", "us-east-1b")]
    if spot is not None:
        offerings += [Offering(z, "spot", spot, zone_id=f"id-{z}") for z in ("us-east-1a", "us-east-1b")]
    return InstanceType(
        name=name,
        labels={
            "node.kubernetes.io/instance-type": name,
            "kubernetes.io/arch": "amd64",
            "karpenter.k8s.aws/instance-family": family,
        },
        capacity={"cpu": 2000, "memory": 8 * GiB, "pods": 29},
        overhead={"cpu": 100, "memory": GiB},
        offerings=tuple(offerings),
    )


TYPES = [itype("m5.large", "m5", 0.096, 0.04), itype("c5.large", "c5", 0.085, 0.035), itype("r5.large", "r5", 0.126)]


def pool(name: str = "default", labels: dict[str, str] | None = None) -> PoolTypes:
    return PoolTypes(name, labels or {}, TYPES)


def prices(types: list[InstanceType], name: str) -> dict[tuple[str, str], float]:
    it = next(t for t in types if t.name == name)
    return {(o.zone, o.capacity_type): round(o.price, 6) for o in it.offerings}


def applied(
    ovs: list[NodeOverlay], pools: list[PoolTypes] | None = None, nodepool: str = "default"
) -> list[InstanceType]:
    pools = pools or [pool()]
    evaluation = evaluate(ovs, pools)
    out = evaluation.apply(nodepool, next(p for p in pools if p.name == nodepool).instance_types)
    assert out is not None
    return out


# Price forms (AdjustedPrice) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (None, 1.0),
        ("", 1.0),
        ("0.25", 0.25),
        ("+0.5", 1.5),
        ("-0.4", 0.6),
        ("-2", 0.0),  # floored at zero
        ("+10%", 1.1),
        ("-15%", 0.85),
        ("-100%", 0.0),
        ("+.5", 1.5),
    ],
)
def test_adjusted_price_forms(change: str | None, expected: float) -> None:
    assert adjusted_price(1.0, change) == pytest.approx(expected)


# Validation -------------------------------------------------------------------------------------------------


def test_valid_overlay_has_no_errors() -> None:
    ov = overlay(
        "ok",
        weight=10,
        reqs=[req("karpenter.k8s.aws/instance-family", "In", "m5"), req("karpenter.sh/capacity-type", "In", "spot")],
        priceAdjustment="-10%",
        capacity={"hugepages-2Mi": "1Gi", "example.com/device": "2"},
    )
    assert validate(ov) == []
    assert ov.weight == 10 and ov.price_change == "-10%" and ov.capacity["example.com/device"] == "2"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"capacity": {"cpu": "1"}}, "invalid capacity: cpu in resource, restricted"),
        ({"capacity": {"pods": "10"}}, "invalid capacity: pods"),
        ({"capacity": {"example.com/x": "lots"}}, "is not a quantity"),
        ({"price": "1", "priceAdjustment": "+1"}, "cannot set both"),
        ({"price": "-1"}, "invalid price"),
        ({"priceAdjustment": "10%"}, "invalid priceAdjustment"),
        ({"priceAdjustment": "-101%"}, "invalid priceAdjustment"),
        ({"weight": 0}, "invalid weight"),
        ({"requirements": [req("karpenter.sh/unknown", "In", "x")]}, "restricted"),
        ({"requirements": [req("kubernetes.io/hostname", "In", "x")]}, "restricted"),
        ({"requirements": [req("team", "NotIn")]}, "must have a value defined"),
        ({"requirements": [req("karpenter.sh/capacity-type", "In", "cheap")]}, "no valid values"),
        ({"requirements": [req("karpenter.k8s.aws/instance-cpu", "Gt", "-1")]}, "single positive integer"),
        ({"requirements": [req("team", "Sometimes", "a")]}, "unsupported operator"),
        ({"requirements": [req("bad key!", "Exists")]}, "not a qualified name"),
        # Shapes the CRD schema refuses (simulate's manifests never met it): never read as "no requirement".
        ({"requirements": "nope"}, "requirements must be a list"),
        ({"requirements": ["karpenter.sh/capacity-type"]}, "requirements must be a list"),
        ({"capacity": "4"}, "capacity must be a map"),
    ],
)
def test_invalid_overlays(spec: dict[str, Any], fragment: str) -> None:
    ov = NodeOverlay.from_json({"metadata": {"name": "bad"}, "spec": {"requirements": [], **spec}})
    assert any(fragment in e for e in validate(ov)), validate(ov)


def test_order_by_weight_then_reverse_name() -> None:
    ovs = [overlay("a"), overlay("b"), overlay("c", weight=5), overlay("ab"), overlay("z", weight=1)]
    assert [o.name for o in order_by_weight(ovs)] == ["c", "z", "b", "ab", "a"]


# Selection and application ----------------------------------------------------------------------------------


def test_absolute_price_applies_to_matched_type_only() -> None:
    out = applied([overlay("cheap-r5", reqs=[req("node.kubernetes.io/instance-type", "In", "r5.large")], price="0.01")])
    assert set(prices(out, "r5.large").values()) == {0.01}
    assert prices(out, "m5.large")[("us-east-1a", "on-demand")] == 0.096
    r5 = next(t for t in out if t.name == "r5.large")
    assert all(o.price_overlaid for o in r5.offerings) and not r5.capacity_overlaid
    assert overlay_annotations([r5]) == {"karpenter.sh/price-overlay-applied": "true"}
    assert overlay_annotations([t for t in out if t.name != "r5.large"]) == {}


def test_capacity_type_requirement_reprices_only_matching_offerings() -> None:
    ov = overlay("spot-up", reqs=[req("karpenter.sh/capacity-type", "In", "spot")], priceAdjustment="+50%")
    out = applied([ov])
    m5 = prices(out, "m5.large")
    assert m5[("us-east-1a", "spot")] == pytest.approx(0.06)
    assert m5[("us-east-1a", "on-demand")] == 0.096
    # r5.large has no spot offering: not matched at all.
    assert not any(o.price_overlaid for t in out if t.name == "r5.large" for o in t.offerings)


def test_zone_requirement_and_nodepool_selector() -> None:
    ov = overlay(
        "zone-a", reqs=[req("topology.kubernetes.io/zone", "In", "us-east-1a"), req("karpenter.sh/nodepool", "In", "b")]
    )
    ov = NodeOverlay.from_json({**ov.raw, "spec": {**ov.raw["spec"], "priceAdjustment": "-0.01"}})
    pools = [pool("a"), pool("b")]
    in_b = applied([ov], pools, "b")
    assert prices(in_b, "c5.large")[("us-east-1a", "on-demand")] == pytest.approx(0.075)
    assert prices(in_b, "c5.large")[("us-east-1b", "on-demand")] == 0.085
    assert prices(applied([ov], pools, "a"), "c5.large")[("us-east-1a", "on-demand")] == 0.085


def test_custom_label_must_come_from_the_nodepool_template() -> None:
    ov = overlay("team", reqs=[req("team", "In", "ml")], price="0.001")
    pools = [pool("ml", {"team": "ml"}), pool("web", {"team": "web"}), pool("plain")]
    assert set(prices(applied([ov], pools, "ml"), "m5.large").values()) == {0.001}
    assert prices(applied([ov], pools, "web"), "m5.large")[("us-east-1a", "on-demand")] == 0.096
    # A key nothing defines matches only NotIn/DoesNotExist.
    assert prices(applied([ov], pools, "plain"), "m5.large")[("us-east-1a", "on-demand")] == 0.096
    absent = overlay("no-team", reqs=[req("team", "DoesNotExist")], price="0.002")
    assert set(prices(applied([absent], pools, "plain"), "m5.large").values()) == {0.002}


def test_instance_label_the_type_lacks_never_matches_exists() -> None:
    ov = overlay("gpus", reqs=[req("karpenter.k8s.aws/instance-gpu-count", "Exists")], price="0.001")
    out = applied([ov])
    assert not any(o.price_overlaid for t in out for o in t.offerings)


def test_capacity_adds_extended_resources_and_keeps_well_known_ones() -> None:
    ov = overlay(
        "hugepages",
        reqs=[req("karpenter.k8s.aws/instance-family", "In", "m5")],
        capacity={"hugepages-2Mi": "1Gi", "example.com/device": "4"},
    )
    out = applied([ov])
    m5 = next(t for t in out if t.name == "m5.large")
    assert m5.capacity["hugepages-2Mi"] == GiB and m5.capacity["example.com/device"] == 4
    assert m5.capacity["cpu"] == 2000 and m5.allocatable["example.com/device"] == 4
    assert m5.capacity_overlaid and not any(o.price_overlaid for o in m5.offerings)
    assert overlay_annotations([m5]) == {"karpenter.sh/capacity-overlay-applied": "true"}
    assert "example.com/device" not in next(t for t in out if t.name == "c5.large").capacity


# Weights and conflicts ----------------------------------------------------------------------------------------


def test_higher_weight_price_wins_without_conflict() -> None:
    heavy = overlay("heavy", weight=10, reqs=[], price="0.5")
    light = overlay("light", weight=1, reqs=[req("karpenter.k8s.aws/instance-family", "In", "m5")], price="0.01")
    evaluation = evaluate([light, heavy], [pool()])
    assert evaluation.applied() == ["heavy", "light"]
    out = evaluation.apply("default", TYPES)
    assert out is not None
    assert set(prices(out, "m5.large").values()) == {0.5}


def test_equal_weight_conflict_keeps_the_later_name_and_rejects_the_other() -> None:
    a = overlay("alpha", weight=5, reqs=[req("karpenter.k8s.aws/instance-family", "In", "m5")], price="0.01")
    b = overlay("bravo", weight=5, reqs=[], priceAdjustment="+1")
    evaluation = evaluate([a, b], [pool()])
    assert evaluation.statuses["bravo"].applied
    status = evaluation.statuses["alpha"]
    assert (status.status, status.reason, status.message) == ("False", "Conflict", "conflict with another overlay")
    out = evaluation.apply("default", TYPES)
    assert out is not None
    # bravo applies everywhere; nothing of alpha (all-or-nothing).
    assert prices(out, "m5.large")[("us-east-1a", "on-demand")] == pytest.approx(1.096)


def test_unweighted_overlays_on_disjoint_types_do_not_conflict() -> None:
    a = overlay("a", reqs=[req("karpenter.k8s.aws/instance-family", "In", "m5")], price="0.01")
    b = overlay("b", reqs=[req("karpenter.k8s.aws/instance-family", "In", "c5")], price="0.02")
    assert evaluate([a, b], [pool()]).applied() == ["a", "b"]


def test_equal_weight_price_and_capacity_on_the_same_type_do_not_conflict() -> None:
    price = overlay("price", weight=3, reqs=[], price="0.01")
    cap = overlay("cap", weight=3, reqs=[], capacity={"example.com/device": "1"})
    evaluation = evaluate([price, cap], [pool()])
    assert evaluation.applied() == ["cap", "price"]


def test_capacity_merges_by_resource_and_conflicts_on_equal_weight() -> None:
    heavy = overlay("heavy", weight=9, reqs=[], capacity={"example.com/device": "8"})
    light = overlay("light", weight=1, reqs=[], capacity={"example.com/device": "1", "hugepages-1Gi": "2Gi"})
    out = applied([heavy, light])
    m5 = next(t for t in out if t.name == "m5.large")
    assert m5.capacity["example.com/device"] == 8 and m5.capacity["hugepages-1Gi"] == 2 * GiB
    twin = overlay("twin", weight=9, reqs=[], capacity={"example.com/device": "2"})
    evaluation = evaluate([heavy, twin], [pool()])
    # Equal weights: "twin" sorts after "heavy", so it is evaluated first and "heavy" conflicts.
    assert evaluation.statuses["heavy"].reason == "Conflict" and evaluation.statuses["twin"].applied


def test_conflict_in_one_nodepool_rejects_the_overlay_everywhere() -> None:
    first = overlay("zz", reqs=[req("karpenter.sh/nodepool", "In", "b")], price="0.3")
    second = overlay("aa", reqs=[], price="0.2")
    evaluation = evaluate([first, second], [pool("a"), pool("b")])
    assert evaluation.statuses["aa"].reason == "Conflict"
    out = evaluation.apply("a", TYPES)
    assert out is not None and prices(out, "m5.large")[("us-east-1a", "on-demand")] == 0.096


def test_invalid_overlay_is_reported_and_not_applied() -> None:
    bad = overlay("bad", reqs=[], capacity={"memory": "1Gi"}, price="0.01")
    evaluation = evaluate([bad], [pool()])
    status = evaluation.statuses["bad"]
    assert status.status == "False" and status.reason == api.REASON_RUNTIME_VALIDATION
    assert "memory" in status.message
    out = evaluation.apply("default", TYPES)
    assert out == TYPES


def test_unevaluated_nodepool_gets_no_instance_types() -> None:
    store = OverlayStore()
    assert store.apply("default", TYPES) is None
    store.evaluation = evaluate([], [pool()])
    assert store.apply("default", TYPES) == TYPES
    assert store.apply("new-pool", TYPES) is None


def test_application_keeps_fresh_offering_state() -> None:
    """The evaluation holds changes, not types: availability and new offerings come from the cloud."""
    evaluation = evaluate([overlay("cheap", reqs=[], price="0.001")], [pool()])
    fresh = [
        InstanceType(
            name="m5.large",
            labels=TYPES[0].labels,
            capacity=TYPES[0].capacity,
            overhead=TYPES[0].overhead,
            offerings=(
                Offering("us-east-1a", "on-demand", 0.2, available=False, zone_id="id-us-east-1a"),
                Offering("us-east-1c", "on-demand", 0.2, zone_id="id-us-east-1c"),
            ),
        )
    ]
    out = evaluation.apply("default", fresh)
    assert out is not None
    first, new = out[0].offerings
    assert first.price == 0.001 and not first.available
    assert new.price == 0.2 and not new.price_overlaid


# Capacity reservations (AWS types.go: a type's requirements name its reservations, or DoesNotExist) -------------


def _reserved_type() -> InstanceType:
    base = itype("m5.large", "m5", 0.096)
    reserved = (
        Offering(
            "us-east-1a", "reserved", 0.02, zone_id="id-us-east-1a", reservation_id="cr-1", reservation_type="default"
        ),
        Offering(
            "us-east-1a", "reserved", 0.03, zone_id="id-us-east-1a", reservation_id="cr-2", reservation_type="default"
        ),
    )
    return InstanceType(
        name=base.name,
        labels=base.labels,
        capacity=base.capacity,
        overhead=base.overhead,
        offerings=(*base.offerings, *reserved),
    )


def test_reservation_id_requirement_reprices_only_that_reservation() -> None:
    rpool = PoolTypes("default", {}, [_reserved_type()])
    ov = overlay("cr-1-free", reqs=[req("karpenter.k8s.aws/capacity-reservation-id", "In", "cr-1")], price="0.001")
    evaluation = evaluate([ov], [rpool])
    assert evaluation.statuses["cr-1-free"].applied
    out = evaluation.apply("default", rpool.instance_types)
    assert out is not None
    by_offering = {(o.capacity_type, o.reservation_id): o.price for o in out[0].offerings if o.zone == "us-east-1a"}
    assert by_offering == {("on-demand", ""): 0.096, ("reserved", "cr-1"): 0.001, ("reserved", "cr-2"): 0.03}


def test_reservation_id_does_not_exist_leaves_reserved_offerings_alone() -> None:
    # A type with reservations has ``capacity-reservation-id In [ids]``: DoesNotExist does not select it (Go
    # Requirements.Intersects); a type without any has DoesNotExist and is selected with all its offerings.
    rpool = PoolTypes("default", {}, [_reserved_type(), itype("c5.large", "c5", 0.085)])
    ov = overlay("no-cr", reqs=[req("karpenter.k8s.aws/capacity-reservation-id", "DoesNotExist")], price="0.001")
    out = evaluate([ov], [rpool]).apply("default", rpool.instance_types)
    assert out is not None
    m5, c5 = out
    assert not any(o.price_overlaid for o in m5.offerings)
    assert all(o.price == 0.001 for o in c5.offerings)


def test_application_is_memoised_per_input_type_object() -> None:
    """Every provisioning, disruption and metrics pass applies the evaluation: an unchanged (frozen) input type gets
    the same overlaid object back instead of a fresh copy; a new input object (fresh offerings) is applied anew."""
    ov = overlay("all-up", priceAdjustment="+10%")
    evaluation = evaluate([ov], [pool()])
    first = evaluation.apply("default", TYPES)
    again = evaluation.apply("default", TYPES)
    assert first is not None and again is not None
    assert all(a is b for a, b in zip(first, again, strict=True))
    fresher = [TYPES[0], itype("c5.large", "c5", 0.1), TYPES[2]]
    out = evaluation.apply("default", fresher)
    assert out is not None and out[0] is first[0] and out[1] is not first[1]
    assert prices(out, "c5.large")[("us-east-1a", "on-demand")] == pytest.approx(0.11)
