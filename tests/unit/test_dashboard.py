"""The Grafana dashboard (``manifests/grafana-dashboard.json``) reads only metrics that exist: every metric name in
every panel query is one of Karpenter v1.15's reference names or a ``karpy_*`` name, and karpy registers it (or it is
NOT_YET, another branch of issue 10 adding it — with the reference test's stale rule: a NOT_YET name karpy already
serves as Karpenter does fails here too). The kustomize base ships it as a ConfigMap Grafana's sidecar picks up."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.unit.test_metrics_reference import (
    EXCEPTIONS,
    NOT_YET,
    REFERENCE,
    Family,
    label_problem,
    merged,
    scale_up_and_down,
    served,
)

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
DASHBOARD = json.loads((MANIFESTS / "grafana-dashboard.json").read_text())
PREFIXES = ("karpenter_", "karpy_", "controller_runtime_", "workqueue_", "client_go_", "operator_", "aws_sdk_go_")
PROMQL_WORDS = {"sum", "by", "count", "rate", "increase", "histogram_quantile", "max", "min", "label_values", "le"}


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets (rows included) and query variables."""
    exprs: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            exprs.extend(str(t["expr"]) for t in panel.get("targets", []))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            exprs.append(str(variable["definition"]))
    return exprs


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (histogram ``_bucket``/``_count``/``_sum`` mapped to the family)."""
    without_labels = re.sub(r"\{[^}]*\}", "", expr)
    names = set()
    for token in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_labels):
        if not token.startswith(PREFIXES):
            continue
        for suffix in ("_bucket", "_count", "_sum"):
            if token.endswith(suffix) and token[: -len(suffix)] in REFERENCE:
                token = token[: -len(suffix)]
        names.add(token)
    return names


def _served_during_a_scale_up() -> dict[str, Family]:
    """The registry's families while a scale-up's nodes are up and after they went (scrape-time collectors render
    only what exists)."""
    scenario = asyncio.run(scale_up_and_down())
    return merged(scenario.families_up, served())


def test_dashboard_reads_only_metrics_karpy_serves() -> None:
    names = set().union(*(metric_names(e) for e in queries(DASHBOARD)))
    assert len(names) >= 15
    unknown = sorted(n for n in names if n not in REFERENCE and not n.startswith("karpy_"))
    assert unknown == [], "not a Karpenter v1.15 metric name nor karpy's"
    assert sorted(names & EXCEPTIONS.keys()) == [], "karpy does not serve these (reasoned exceptions)"
    families = _served_during_a_scale_up()
    missing = sorted(n for n in names if n not in families and n not in NOT_YET)
    assert missing == [], "read by the dashboard but not registered"
    stale = sorted(n for n in names & NOT_YET.keys() if n in families and not label_problem(n, families[n]))
    assert stale == [], "served as Karpenter's: strike from NOT_YET"


def test_the_required_panels_are_there() -> None:
    """Issue 10's panels: pods pending, nodes by NodePool and capacity type, cost per hour, disruption decisions,
    NodeClaims created/terminated, usage vs limits, cloud-provider errors, interruption messages, reconcile errors,
    work queue depth."""
    by_title = {p["title"]: " ".join(t["expr"] for t in p.get("targets", [])) for p in DASHBOARD["panels"]}
    wanted = {
        "Pods pending": "karpenter_pods_state",
        "Nodes by NodePool and capacity type": "count by (nodepool, capacity_type)",
        "Cost per hour": "karpenter_nodepools_cost_total",
        "Disruption decisions": "karpenter_voluntary_disruption_decisions_total",
        "NodeClaims created / terminated": "karpenter_nodeclaims_terminated_total",
        "NodePool usage vs limits": "karpenter_nodepools_limit",
        "Cloud provider errors": "karpenter_cloudprovider_errors_total",
        "Interruption messages": "karpenter_interruption_received_messages_total",
        "Reconcile errors": "controller_runtime_reconcile_errors_total",
        "Work queue depth": "workqueue_depth",
    }
    for title, needle in wanted.items():
        assert needle in by_title.get(title, ""), title


def test_panel_ids_are_unique_and_every_query_names_a_metric() -> None:
    """No metric name escapes the check above: each identifier of a query (label matchers, ranges and strings
    aside) is a PromQL word, a label the query groups by, or a name with a checked prefix."""
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for expr in queries(DASHBOARD):
        assert metric_names(expr), expr
        grouped = set().union(*(g.replace(" ", "").split(",") for g in re.findall(r"by \(([^)]*)\)", expr)))
        grouped |= set(re.findall(r"label_values\([^,]*,\s*(\w+)\)", expr))
        bare = re.sub(r"\{[^}]*\}|\[[^]]*\]|\"[^\"]*\"|by \([^)]*\)", "", expr)
        tokens = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)) - PROMQL_WORDS - grouped
        assert all(t.startswith(PREFIXES) for t in tokens), (expr, tokens)


def test_kustomize_ships_the_dashboard_as_a_grafana_configmap() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    [generator] = [g for g in kustomization["configMapGenerator"] if g["name"] == "karpy-grafana-dashboard"]
    assert generator["files"] == ["grafana-dashboard.json"] and generator["namespace"] == "karpy"
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}
    assert generator["options"]["disableNameSuffixHash"] is True
