# karpy — two commands do everything on a fresh machine:
#   make demo   builds what is missing, starts a local cluster (real control plane + KWOK + moto) and karpy,
#               applies a NodePool, an EC2NodeClass and a Deployment, and prints nodes appearing/disappearing.
#   make test   builds what is missing and runs lint, type checks, unit, integration and e2e tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all venv controlplane lint test test-fast demo chaos bench-simulate bench-live clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Kubernetes control plane, etcd and KWOK built from Go modules, cached in ~/.cache/karpy-testbin.
controlplane:
	bash e2e/cluster/build.sh >/dev/null

# Reference built from Karpenter v1.15's own Go modules (e2e/karpenter_ref), cached in ~/.cache/karpy-karpenter-ref.
# tests/reference builds it on first use too; this target only builds it ahead of time.
.PHONY: karpenter-ref
karpenter-ref:
	nice -n 19 bash e2e/karpenter_ref/build.sh

lint: venv
	$(VENV)/bin/ruff check karpy tests e2e conftest.py $(wildcard benchmarks)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: venv controlplane lint
	$(PY) -m pytest -p no:cacheprovider -q -ra --durations=15

# Unit tests only: no control plane, no moto.
test-fast: venv
	$(PY) -m pytest -p no:cacheprovider -q tests/unit tests/scheduling

demo: venv controlplane
	$(PY) -m e2e.demo

# Not part of `make test`: karpy SIGKILLed at random moments of 50 random scale-ups/downs on the local cluster;
# prints leaks, double launches, orphans, stuck objects (all must be 0) and settle times. ARGS="--rounds 5 --seed 1".
chaos: venv controlplane
	$(PY) -m e2e.chaos $(ARGS)

# Not part of `make test`: `karpy simulate` wall time and peak RSS at 1k/5k/20k generated pods, PASS/FAIL against
# the 20k targets (<= 5 s, <= 400 MB). ARGS="--sizes 20000 --repeat 5".
bench-simulate: venv
	$(PY) -m benchmarks.simulate $(ARGS)

# Not part of `make test`: karpy and Karpenter (its KWOK provider, built once into ~/.cache/karpy-karpenter-kwok) side
# by side on fresh local clusters at 1k/5k/10k pods (benchmarks/live/README.md). Takes the cluster lock per cluster
# run itself. ARGS="--sizes 1000 --runs 3 --json live.json".
bench-live: venv controlplane
	nice -n 19 $(PY) -m benchmarks.live $(ARGS)

clean:
	rm -rf $(VENV) .e2e-run .mypy_cache .ruff_cache
