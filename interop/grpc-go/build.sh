#!/usr/bin/env bash
# Builds grpc-go v1.83.2's own interop programs (google.golang.org/grpc/interop/client and
# interop/server, as bin/grpc-go-client and bin/grpc-go-server) and this directory's programs
# (bin/testing-descriptors, bin/gzip-interop). go.mod/go.sum are committed: the build never edits them
# (-mod=readonly) and never fetches a toolchain (GOTOOLCHAIN=local). A cold module cache downloads
# grpc-go and the modules its interop client links (xDS, ALTS, Google credentials: ~20 module
# zips) from the Go proxy.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
start=$EPOCHREALTIME
mkdir -p bin
go build -trimpath -buildvcs=false -o bin/grpc-go-client google.golang.org/grpc/interop/client
go build -trimpath -buildvcs=false -o bin/grpc-go-server google.golang.org/grpc/interop/server
go build -trimpath -buildvcs=false -o bin/ ./cmd/...
end=$EPOCHREALTIME
awk -v s="$start" -v e="$end" 'BEGIN { printf "built bin/grpc-go-client bin/grpc-go-server bin/testing-descriptors bin/gzip-interop in %.1fs\n", e - s }' >&2
