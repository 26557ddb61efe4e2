#!/usr/bin/env bash
# Prints a PATH with every command of the current PATH except `protoc`, for checking that a build
# needs no protoc on this machine (which has one): `PATH=$(scripts/without_protoc.sh DIR) cargo ...`
# with PROTOC unset. DIR (created) holds symlinks to each directory's commands but protoc.
set -euo pipefail
dir=${1:?usage: without_protoc.sh DIR}
mkdir -p "$dir"
out=()
i=0
IFS=: read -ra entries <<<"$PATH"
for entry in "${entries[@]}"; do
  [[ -d $entry ]] || continue
  i=$((i + 1))
  links="$dir/$i"
  mkdir -p "$links"
  for cmd in "$entry"/*; do
    name=${cmd##*/}
    [[ $name == protoc || -e $links/$name ]] && continue
    [[ -x $cmd && ! -d $cmd ]] && ln -s "$cmd" "$links/$name"
  done
  out+=("$links")
done
(IFS=:; echo "${out[*]}")
