#!/usr/bin/env bash
# Builds karpenter-ref (main.go next to this script) against Karpenter's own Go modules, once, into a cache
# outside the repo:
#   $KARPY_KARPENTER_REF (default ~/.cache/karpy-karpenter-ref)/core-<v>-aws-<v>-<main.go sha>/karpenter-ref
# and prints that binary's path on stdout. Idempotent: an existing binary is kept.
#
# Pinned versions: the newest v1.15 pair the Go module proxy serves. github.com/aws/karpenter-provider-aws
# v1.15.1 exists but requires sigs.k8s.io/karpenter v1.15.1, whose zip the proxy refuses ("403 This module
# version is not available"), so the released pair v1.15.0 / v1.15.0 is used. Both need go >= 1.26.9:
# GOTOOLCHAIN=auto lets the go command fetch that toolchain from the module proxy only when the machine's
# Go is older. Karpenter's files stay in the module cache; nothing is copied into the repository.
set -euo pipefail
CORE="${KARPENTER_CORE_VERSION:-v1.15.0}"
AWS="${KARPENTER_AWS_VERSION:-v1.15.0}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_SHA="$(sha256sum "$HERE/main.go" | cut -c1-12)"
ROOT="${KARPY_KARPENTER_REF:-$HOME/.cache/karpy-karpenter-ref}"
OUT="$ROOT/core-$CORE-aws-$AWS-$SRC_SHA"
BIN="$OUT/karpenter-ref"
# Modules the provider's pkg/aws imports for clients karpenter-ref never calls.
UNAVAILABLE_OK="github.com/aws/aws-sdk-go-v2/service/timestreamwrite"
export GOTOOLCHAIN=auto CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod
log() { printf '[karpenter-ref %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [ ! -x "$BIN" ]; then
  log "building against sigs.k8s.io/karpenter $CORE, github.com/aws/karpenter-provider-aws $AWS (first time only)"
  mkdir -p "$OUT"
  W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
  (
    cd "$W"
    cp "$HERE/main.go" .
    go mod init karpy.local/karpenter-ref >/dev/null 2>&1
    # go get raises the go line (and so the toolchain) to what the modules require.
    go get "sigs.k8s.io/karpenter@$CORE" "github.com/aws/karpenter-provider-aws@$AWS" >&2
    # The proxy refuses some versions the provider's go.mod pins (403 "not available"); for a module main.go
    # reaches only through the provider's AWS clients, fall back to the newest version the proxy serves.
    # `go mod tidy` is not run: it would also resolve the dependencies' test-only imports (e.g. service/fis).
    for m in $UNAVAILABLE_OK; do
      want="$(go list -m -f '{{.Version}}' "$m")"
      if ! go mod download "$m@$want" 2>/dev/null; then
        got="$(go list -m -f '{{.Version}}' "$m@latest")"
        log "$m@$want is not served by the module proxy; using $got (not used by crds/hash/userdata)"
        go mod edit -replace="$m=$m@$got"
      fi
    done
    go list -m sigs.k8s.io/karpenter github.com/aws/karpenter-provider-aws >&2
    go build -trimpath -ldflags="-s -w" -o "$BIN.tmp" .
    mv "$BIN.tmp" "$BIN"
  )
  rm -rf "$W"; trap - EXIT
fi
echo "$BIN"
