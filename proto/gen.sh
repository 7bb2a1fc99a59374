#!/usr/bin/env bash
# Regenerates the protobuf-es code (target=ts) with protoc + protoc-gen-es:
#  - proto/gen from proto/src (skiff's own: the shim protocol), plus the server's wire tables;
#  - examples/vm/proto/agent_pb.ts from examples/vm/proto/agent.proto (the VM example's own
#    agent protocol: an example owns its protocol, as a runtime author's project would).
# With --check, generates into temp dirs and fails if the committed output differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v protoc >/dev/null || { echo "proto/gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 2; }
command -v deno >/dev/null || { echo "proto/gen.sh: deno not found" >&2; exit 2; }
# protoc looks for the well-known types in <its dir>/../include; Debian ships them separately.
wkt="$(dirname "$(command -v protoc)")/../include/google/protobuf/timestamp.proto"
[ -r "$wkt" ] || { echo "proto/gen.sh: $wkt not found (apt-get install libprotobuf-dev)" >&2; exit 2; }
check=false
[ "${1:-}" = "--check" ] && check=true

# protoc_es SRC_DIR OUT_DIR: every .proto below SRC_DIR into OUT_DIR (which must exist).
protoc_es() {
  local files
  mapfile -t files < <(cd "$1" && find . -name '*.proto' | sed 's|^\./||' | sort)
  (cd "$1" && protoc --plugin=protoc-gen-es="$here/protoc-gen-es" \
    --es_out="$2" --es_opt=target=ts,import_extension=ts -I . "${files[@]}")
  echo "${#files[@]}"
}

new=$(mktemp -d)
trap 'rm -rf "$new"' EXIT
mkdir -p "$new/gen" "$new/vm"
count=$(protoc_es "$here/src" "$new/gen")
# The server's wire tables, read from the descriptors just generated (proto/gen_wire.ts).
deno run --quiet --allow-read --allow-write --config "$repo/deno.json" "$here/gen_wire.ts" "$new/gen"
deno fmt --quiet --config "$repo/deno.json" --ext ts "$new/gen/wire/shim_wire.ts" 2>/dev/null || true
protoc_es "$repo/examples/vm/proto" "$new/vm" >/dev/null

if $check; then
  stale=false
  if ! diff -r "$new/gen" "$here/gen" >/dev/null; then
    diff -r "$new/gen" "$here/gen" | head -20 >&2
    stale=true
  fi
  if ! diff "$new/vm/agent_pb.ts" "$repo/examples/vm/proto/agent_pb.ts" >/dev/null 2>&1; then
    echo "examples/vm/proto/agent_pb.ts differs" >&2
    stale=true
  fi
  $stale && { echo "generated code is stale: run 'deno task gen' and commit the result" >&2; exit 1; }
  echo "proto/gen and examples/vm/proto are up to date"
else
  rm -rf "$here/gen" && mv "$new/gen" "$here/gen"
  mv "$new/vm/agent_pb.ts" "$repo/examples/vm/proto/agent_pb.ts"
  echo "generated $count files into proto/gen, and examples/vm/proto/agent_pb.ts"
fi
