#!/usr/bin/env bash
# Builds the local control plane's binaries from Go modules, once, into a cache outside the repo:
#   $KARPY_TESTBIN (default ~/.cache/karpy-testbin)/<version>/{kube-apiserver,kube-controller-manager,
#   kube-scheduler,etcd,kwok}
# No prebuilt Kubernetes binaries can be downloaded here, so kube's main packages are built from a
# wrapper module that replaces every staging module with its published v0.X.Y
# (see shared/reference/local-control-plane.md). Idempotent: existing binaries are kept.
set -euo pipefail
K8S="${K8S_VERSION:-v1.34.4}"
ETCD="${ETCD_VERSION:-v3.6.16}"
KWOK="${KWOK_VERSION:-v0.7.0}"
ROOT="${KARPY_TESTBIN:-$HOME/.cache/karpy-testbin}"
OUT="$ROOT/k8s-$K8S-etcd-$ETCD-kwok-$KWOK"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

have() { [ -x "$OUT/$1" ]; }
mkdir -p "$OUT"

if ! have kube-apiserver || ! have kube-controller-manager || ! have kube-scheduler; then
  log "building kubernetes $K8S control plane (first time only, ~15-25 min on 2 cores)"
  STAGING="v0.${K8S#v1.}"
  MINOR="$(echo "$K8S" | cut -d. -f2)"
  W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
  (
    cd "$W"
    go mod init k8stestbin >/dev/null 2>&1
    KGOMOD="$(go mod download -json "k8s.io/kubernetes@$K8S" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')"
    go mod edit -go="$(sed -n 's/^go //p' "$KGOMOD")"
    sed -n 's/^godebug //p' "$KGOMOD" | while read -r d; do go mod edit -godebug="$d"; done
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$KGOMOD"); do
      go mod edit -replace="$m=$m@$STAGING"
    done
    go mod edit -require="k8s.io/kubernetes@$K8S"
    for c in kube-apiserver kube-controller-manager kube-scheduler; do go mod edit -tool="k8s.io/kubernetes/cmd/$c"; done
    go mod tidy
    LD="-s -w"; BD="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      LD+=" -X $p.gitVersion=$K8S -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=$BD"
    done
    go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$LD" -o "$OUT/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler
  )
  rm -rf "$W"; trap - EXIT
fi

if ! have etcd; then
  log "building etcd $ETCD"
  E="$(mktemp -d)"
  (
    cd "$E"
    go mod init etcdtestbin >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD" -tool=go.etcd.io/etcd/server/v3
    go mod tidy
    go build -trimpath -ldflags="-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$E"
fi

if ! have kwok; then
  log "building kwok $KWOK"
  GOBIN="$OUT" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK"
fi

"$OUT/kube-apiserver" --version >&2
echo "$OUT"
