#!/usr/bin/env bash
# Builds bin/toxiproxy-server: Shopify's Toxiproxy v2.12.0, the fault proxy of the network-fault
# tests (tests/src/toxiproxy.rs). go.mod/go.sum are committed: the build never edits them
# (-mod=readonly) and never fetches a toolchain (GOTOOLCHAIN=local). A cold module cache
# downloads 17 modules from the Go proxy (44 MB of module cache); cold, the build took 63 s on the
# 2-core dev machine, warm 0.4 s.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
start=$EPOCHREALTIME
go build -trimpath -buildvcs=false -o bin/toxiproxy-server github.com/Shopify/toxiproxy/v2/cmd/server
end=$EPOCHREALTIME
awk -v s="$start" -v e="$end" 'BEGIN { printf "built bin/toxiproxy-server in %.1fs\n", e - s }' >&2
