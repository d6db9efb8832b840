"""The fast YAML path of ``karpy simulate`` (karpy.simulate.yamlload) loads what ``yaml.safe_load_all`` loads, falls
back to PyYAML's pure-Python parser without libyaml, and leaves the plan unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.simulate import write_manifests
from karpy.simulate import plan as plan_module
from karpy.simulate import yamlload
from karpy.simulate.catalogue import choose_catalogue
from karpy.simulate.manifests import collect
from karpy.simulate.plan import plan_to_json, simulate
from karpy.simulate.reading import Document, parse_documents, read_sources, to_object
from karpy.simulate.validation import ManifestError

TRICKY = """\
a: 1
b: yes
c: ~
d: 1.5
e: 1e3
f: "5"
g: !!str 7
h: 2026-11-25
i: !!binary aGk=
base: &base {x: 1, y: [a, b]}
merged:
  <<: *base
  z: 2
alias: *base
list: [1, two, null, true, {k: v}]
empty: {}
=: plain equals key
---
---
- plain
- 0o17
- 0x1F
"""


def loaders() -> list[Any]:
    return [yamlload.PY_LOADER] + ([yamlload.C_LOADER] if yamlload.C_LOADER is not None else [])


@pytest.mark.parametrize("loader", loaders(), ids=lambda c: c.__name__)
def test_fast_load_equals_safe_load_all(loader: Any) -> None:
    assert list(yamlload.load_all(TRICKY, loader)) == list(yaml.safe_load_all(TRICKY))


@pytest.mark.parametrize("loader", loaders(), ids=lambda c: c.__name__)
def test_aliases_keep_their_identity(loader: Any) -> None:
    doc = next(yamlload.load_all("x: &a [1]\ny: *a\n", loader))
    assert doc["x"] is doc["y"]


@pytest.mark.parametrize("loader", loaders(), ids=lambda c: c.__name__)
def test_unhashable_key_is_invalid_yaml(loader: Any) -> None:
    with pytest.raises(ManifestError, match="invalid YAML"):
        parse_documents("apiVersion: v1\nkind: Pod\n? [a]\n: b\n", "bad.yaml", loader)


def test_without_libyaml_the_python_parser_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert yamlload.safe_loader() is yaml.SafeLoader
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n"
    assert [d.obj for d in parse_documents(text, "x.yaml")] == [yaml.safe_load(text)]


def test_libyaml_is_preferred_when_present() -> None:
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML built without libyaml")
    assert yamlload.safe_loader() is yaml.CSafeLoader


def _old_documents(directory: Path) -> list[Document]:
    """What the reader produced before the fast path: yaml.safe_load_all per file."""
    docs = []
    for path in sorted(p for p in directory.rglob("*.yaml")):
        for i, obj in enumerate((d for d in yaml.safe_load_all(path.read_text()) if d is not None), start=1):
            docs.append(Document(f"{path}#{i}", to_object(obj, f"{path}#{i}")))
    return docs


def test_fast_path_gives_the_same_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_manifests(tmp_path, 300)
    catalogue = choose_catalogue(None, "us-east-1", spot_price_ratio=0.35)
    fast = plan_to_json(simulate(collect(read_sources([str(tmp_path)])), catalogue))
    # The reference: the old reader, and the launch choice made for every NodeClaim (no memo).
    monkeypatch.setattr(plan_module, "_launch_once", lambda _memo, claim, zones: plan_module.launch(claim, zones))
    old = plan_to_json(simulate(collect(_old_documents(tmp_path)), catalogue))
    for result in (fast, old):
        result.pop("solveSeconds")
    assert fast["summary"]["podsOnNewNodes"] == 300
    assert fast == old


def test_timings_flag_prints_the_phases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.simulate import parse_timings
    from karpy.cli.main import main

    write_manifests(tmp_path, 20)
    assert main(["simulate", "-f", str(tmp_path), "--spot-price-ratio", "0.35", "--timings"]) == 0
    phases = parse_timings(capsys.readouterr().err)
    assert {"read", "catalogue", "prepare", "solve", "launch", "output", "total"} <= set(phases)


REPEATED = """\
a: yes
b: 'yes'
c: "8080"
d: 8080
e: ~
f: null
g: 0o17
h: 017
i: 1_000
j: .inf
k: 2026-11-25
---
b: yes
a: 'yes'
d: "8080"
c: 8080
e: '~'
g: '0o17'
h: 017
"""


@pytest.mark.parametrize("loader", loaders(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("limit", [2, yamlload.CACHE_LIMIT])
def test_remembered_tags_and_values_match_safe_load(loader: Any, limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same texts plain and quoted, in both orders and across documents: a remembered tag is per plain text only.
    monkeypatch.setattr(yamlload, "CACHE_LIMIT", limit)
    for _ in range(2):  # the second pass reads what the first one remembered
        assert list(yamlload.load_all(REPEATED, loader)) == list(yaml.safe_load_all(REPEATED))
        assert list(yamlload.load_all(TRICKY, loader)) == list(yaml.safe_load_all(TRICKY))
    assert len(yamlload._values) <= max(limit, 1)


def test_resolving_loader_is_a_subclass_and_made_once() -> None:
    sub = yamlload._resolving(yaml.SafeLoader)
    assert issubclass(sub, yaml.SafeLoader) and yamlload._resolving(yaml.SafeLoader) is sub
    list(yamlload.load_all(REPEATED, yaml.SafeLoader))
    info = sub.resolve.cache_info()  # type: ignore[attr-defined]
    assert info.hits > 0 and info.currsize <= info.maxsize == yamlload.CACHE_LIMIT


def test_a_loader_with_path_resolvers_keeps_its_own_resolver() -> None:
    class WithPaths(yaml.SafeLoader):
        pass

    WithPaths.add_path_resolver("tag:yaml.org,2002:set", ["spec"], dict)
    sub = yamlload._resolving(WithPaths)
    assert sub.resolve is WithPaths.resolve and sub.descend_resolver is WithPaths.descend_resolver
    text = "spec: {a: null}\nother: {a: null}\n"
    assert (
        next(yamlload.load_all(text, WithPaths)) == yaml.load(text, WithPaths) == {"spec": {"a"}, "other": {"a": None}}
    )
