"""Diff two sets of CRDs schema path by schema path: karpy's (manifests/crds) against Karpenter's (the reference).

A schema path names one node of a CRD version's ``openAPIV3Schema``: ``.spec.template.spec.taints[].key``
(``[]`` = array items, ``{}`` = additionalProperties). Differences, per CRD:

- ``crd``: a CRD only one side has;
- ``identity``: the same CRD with a different group, scope, kind, plural or storage version;
- ``only_karpenter`` / ``only_karpy``: paths one side has and the other lacks;
- ``type``, ``enum``, ``default``, ``format``, ``pattern``, ``required``, the bounds (``minimum``, ``maxLength``,
  ``maxItems``, ...) and the ``x-kubernetes-*`` list/map markers: the same path with a different value (the key
  names the kind of difference);
- ``cel``: the same path with a different set of ``x-kubernetes-validations`` rules.

Descriptions are not compared (karpy's are its own). :func:`check_allowed` matches differences against the
documented allow-list (e2e/karpenter_ref/schema_allowlist.py).

Run ``python -m e2e.karpenter_ref.schema_diff`` (builds the reference if needed) to print the summary, every
difference and whether each is allowed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.karpenter_ref.schema_allowlist import ALLOWED, AllowedDifference

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "crds"
COMPARED = (
    "type",
    "enum",
    "default",
    "format",
    "pattern",
    "required",
    "nullable",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
)


@dataclass(frozen=True, order=True)
class Difference:
    """One difference: the CRD's name, the kind (``crd``, ``only_karpenter``, ``type``, ...), the schema path
    (``''`` for ``crd``), and both sides' values (``None`` where absent)."""

    crd: str
    kind: str
    path: str
    karpenter: str | None = None
    karpy: str | None = None


def karpy_crds(directory: Path = MANIFESTS) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in ``manifests/crds/*.yaml``."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
    return docs


def storage_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the storage version (``{}`` when there is none)."""
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return dict((version.get("schema") or {}).get("openAPIV3Schema") or {})
    return {}


def walk(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every ``(path, node)`` of a structural schema, the root as ``''``."""
    yield path, schema
    for name, sub in sorted((schema.get("properties") or {}).items()):
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def _show(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _cel(node: Mapping[str, Any]) -> list[str]:
    return sorted(str(v.get("rule")) for v in node.get("x-kubernetes-validations") or [])


def diff_schemas(crd: str, karpenter: Mapping[str, Any], karpy: Mapping[str, Any]) -> list[Difference]:
    """Differences between two ``openAPIV3Schema`` trees of the CRD named ``crd``."""
    theirs, ours = dict(walk(karpenter)), dict(walk(karpy))
    out = [Difference(crd, "only_karpenter", p) for p in sorted(theirs.keys() - ours.keys())]
    out += [Difference(crd, "only_karpy", p) for p in sorted(ours.keys() - theirs.keys())]
    for path in sorted(theirs.keys() & ours.keys()):
        a, b = theirs[path], ours[path]
        for key in COMPARED:
            if a.get(key) != b.get(key):
                out.append(Difference(crd, key, path, _show(a.get(key)), _show(b.get(key))))
        if _cel(a) != _cel(b):
            out.append(Difference(crd, "cel", path, _show(_cel(a)), _show(_cel(b))))
    return out


def identity(crd: Mapping[str, Any]) -> dict[str, Any]:
    """What names a CRD's objects: group, scope, kind, plural and the storage version's name."""
    spec = crd["spec"]
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    names = spec.get("names") or {}
    return {
        "group": spec.get("group"),
        "scope": spec.get("scope"),
        "kind": names.get("kind"),
        "plural": names.get("plural"),
        "storage": storage,
    }


def diff_crds(karpenter: Iterable[Mapping[str, Any]], karpy: Iterable[Mapping[str, Any]]) -> list[Difference]:
    """Differences between two sets of CRDs, matched by ``metadata.name``."""
    theirs = {c["metadata"]["name"]: c for c in karpenter}
    ours = {c["metadata"]["name"]: c for c in karpy}
    out = [Difference(n, "crd", "", karpenter="present") for n in sorted(theirs.keys() - ours.keys())]
    out += [Difference(n, "crd", "", karpy="present") for n in sorted(ours.keys() - theirs.keys())]
    for name in sorted(theirs.keys() & ours.keys()):
        a, b = identity(theirs[name]), identity(ours[name])
        if a != b:
            out.append(Difference(name, "identity", "", _show(a), _show(b)))
        out += diff_schemas(name, storage_schema(theirs[name]), storage_schema(ours[name]))
    return out


def check_allowed(
    differences: Iterable[Difference], allowed: Iterable[AllowedDifference] = ALLOWED
) -> tuple[list[Difference], list[AllowedDifference]]:
    """``(unexpected, stale)``: the differences no allow-list entry names (by crd, kind and path), and the
    entries that name no difference any more (or give no reason) — both must be empty."""
    allowed = list(allowed)
    differences = list(differences)
    listed = {(a.crd, a.kind, a.path) for a in allowed}
    seen = {(d.crd, d.kind, d.path) for d in differences}
    unexpected = [d for d in differences if (d.crd, d.kind, d.path) not in listed]
    stale = [a for a in allowed if (a.crd, a.kind, a.path) not in seen or not a.reason.strip()]
    return unexpected, stale


def summary(differences: Iterable[Difference]) -> str:
    """One line per CRD: its name and the count of each kind of difference."""
    per_crd: dict[str, Counter[str]] = {}
    for d in differences:
        per_crd.setdefault(d.crd, Counter())[d.kind] += 1
    lines = []
    for crd, counts in sorted(per_crd.items()):
        detail = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        lines.append(f"{crd}: {sum(counts.values())} ({detail})")
    return "\n".join(lines)


def main() -> None:
    from e2e.karpenter_ref import KarpenterRef, ensure_binary

    differences = diff_crds(KarpenterRef(ensure_binary()).crds(), karpy_crds())
    unexpected, stale = check_allowed(differences)
    for d in differences:
        mark = "UNEXPECTED" if d in unexpected else "allowed"
        print(f"{mark} {d.crd} {d.kind} {d.path} karpenter={d.karpenter} karpy={d.karpy}")
    for a in stale:
        print(f"STALE allow-list entry {a.crd} {a.kind} {a.path!r}: {a.reason}")
    print(summary(differences) or "no differences")
    print(f"{len(differences)} differences, {len(unexpected)} not allowed, {len(stale)} stale allow-list entries")


if __name__ == "__main__":
    main()
