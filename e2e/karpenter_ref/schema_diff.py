"""Diff two sets of CRDs schema path by schema path: karpy's (manifests/crds) against Karpenter's (the reference).

A schema path names one node of a CRD version's ``openAPIV3Schema``: ``.spec.template.spec.taints[].key``
(``[]`` = array items, ``{}`` = additionalProperties). Differences, per CRD:

- ``crd``: a CRD only one side has;
- ``only_karpenter`` / ``only_karpy``: paths one side has and the other lacks;
- ``type``, ``enum``, ``default``, ``format``, ``pattern``, ``required``, the bounds (``minimum``, ``maxLength``,
  ``maxItems``, ...) and the ``x-kubernetes-*`` list/map markers: the same path with a different value (the key
  names the kind of difference);
- ``cel``: the same path with a different set of ``x-kubernetes-validations`` rules.

Run ``python -m e2e.karpenter_ref.schema_diff`` (builds the reference if needed) to print the summary and
every difference.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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


def diff_crds(karpenter: Iterable[Mapping[str, Any]], karpy: Iterable[Mapping[str, Any]]) -> list[Difference]:
    """Differences between two sets of CRDs, matched by ``metadata.name``."""
    theirs = {c["metadata"]["name"]: c for c in karpenter}
    ours = {c["metadata"]["name"]: c for c in karpy}
    out = [Difference(n, "crd", "", karpenter="present") for n in sorted(theirs.keys() - ours.keys())]
    out += [Difference(n, "crd", "", karpy="present") for n in sorted(ours.keys() - theirs.keys())]
    for name in sorted(theirs.keys() & ours.keys()):
        out += diff_schemas(name, storage_schema(theirs[name]), storage_schema(ours[name]))
    return out


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
    for d in differences:
        print(f"{d.crd} {d.kind} {d.path} karpenter={d.karpenter} karpy={d.karpy}")
    print(summary(differences))


if __name__ == "__main__":
    main()
