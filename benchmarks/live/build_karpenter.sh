#!/usr/bin/env bash
# Builds Karpenter core's KWOK provider (the main package sigs.k8s.io/karpenter/kwok) from Go modules, once,
# into a cache outside the repo:
#   $KARPY_KARPENTER_KWOK (default ~/.cache/karpy-karpenter-kwok)/core-<v>/karpenter-kwok
# and prints that binary's path on stdout. Idempotent: an existing binary is kept.
#
# Pinned: sigs.k8s.io/karpenter v1.15.0, the same core version e2e/karpenter_ref/build.sh builds against
# (v1.15.1's zip is refused by the module proxy). Its go.mod needs go >= 1.26.9: GOTOOLCHAIN=auto lets the go
# command fetch that toolchain from the module proxy only when the machine's Go is older. The binary is built
# from a throwaway wrapper module that requires Karpenter; Karpenter's files stay in the module cache and
# nothing is copied into the repository. Used only by the live benchmark (benchmarks/live), never by `make test`.
set -euo pipefail
CORE="${KARPENTER_CORE_VERSION:-v1.15.0}"
ROOT="${KARPY_KARPENTER_KWOK:-$HOME/.cache/karpy-karpenter-kwok}"
OUT="$ROOT/core-$CORE"
BIN="$OUT/karpenter-kwok"
export GOTOOLCHAIN=auto CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
log() { printf '[karpenter-kwok %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [ ! -x "$BIN" ]; then
  log "building sigs.k8s.io/karpenter/kwok@$CORE (first time only)"
  mkdir -p "$OUT"
  W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
  (
    cd "$W"
    go mod init karpy.local/karpenter-kwok >/dev/null 2>&1
    # go get raises the go line (and so the toolchain) to what Karpenter requires and records the
    # requirements of the kwok main package's imports.
    go get "sigs.k8s.io/karpenter/kwok@$CORE" >&2
    go list -m sigs.k8s.io/karpenter >&2
    go build -trimpath -ldflags="-s -w" -o "$BIN.tmp" sigs.k8s.io/karpenter/kwok
    mv "$BIN.tmp" "$BIN"
  )
  rm -rf "$W"; trap - EXIT
fi
echo "$BIN"
