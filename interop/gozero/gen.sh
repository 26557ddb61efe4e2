#!/usr/bin/env bash
# Generates greeter/greeter.pb.go and greeter/greeter_grpc.pb.go from ../../proto/greeter.proto
# (the same proto the Rust zrpc examples use) with pinned plugins installed into .bin/.
#
#   ./gen.sh           install the plugins if missing, regenerate greeter/ in place
#   ./gen.sh --check   regenerate into a temp dir and diff against the committed files (exit 1 on drift)
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local

PROTOC_GEN_GO_VERSION=v1.36.11      # = the google.golang.org/protobuf runtime in go.mod
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # emits SupportPackageIsVersion9 (needs grpc >= 1.64; we have 1.80.0)
PROTOC=${PROTOC:-protoc}
PROTO_DIR=../../proto
PKG=zrpc-interop/gozero/greeter

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mkdir -p .bin
bin=$PWD/.bin
# Install a plugin unless .bin already holds the pinned version.
install_plugin() { # name module version
  local name=$1 mod=$2 ver=$3
  if [[ -x $bin/$name ]] && go version -m "$bin/$name" 2>/dev/null | grep -q "[[:space:]]$ver[[:space:]]"; then
    return
  fi
  echo "installing $name@$ver into .bin/" >&2
  GOBIN=$bin GOFLAGS= go install "$mod@$ver"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

out=greeter
if (( check )); then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

"$PROTOC" -I "$PROTO_DIR" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=paths=source_relative --go_opt=Mgreeter.proto=$PKG \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative --go-grpc_opt=Mgreeter.proto=$PKG \
  "$PROTO_DIR/greeter.proto"

if (( check )); then
  status=0
  for f in greeter.pb.go greeter_grpc.pb.go; do
    diff -u "greeter/$f" "$out/$f" || status=1
  done
  if (( status )); then
    echo "gen.sh --check: greeter/ is out of date; run ./gen.sh" >&2
  else
    echo "gen.sh --check: greeter/ is up to date" >&2
  fi
  exit $status
fi
echo "generated greeter/greeter.pb.go greeter/greeter_grpc.pb.go" >&2
