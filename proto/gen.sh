#!/usr/bin/env bash
# Regenerates proto/gen from proto/src with protoc + protoc-gen-es (target=ts).
# With --check, generates into a temp dir and fails if the committed output differs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v protoc >/dev/null || { echo "proto/gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 2; }
# protoc looks for the well-known types in <its dir>/../include; Debian ships them separately.
wkt="$(dirname "$(command -v protoc)")/../include/google/protobuf/timestamp.proto"
[ -r "$wkt" ] || { echo "proto/gen.sh: $wkt not found (apt-get install libprotobuf-dev)" >&2; exit 2; }
out="$here/gen"
if [ "${1:-}" = "--check" ]; then out=$(mktemp -d); fi
rm -rf "$out.new" && mkdir -p "$out.new"
cd "$here/src"
mapfile -t files < <(find . -name '*.proto' | sed 's|^\./||' | sort)
protoc --plugin=protoc-gen-es="$here/protoc-gen-es" \
  --es_out="$out.new" --es_opt=target=ts,import_extension=ts \
  -I . "${files[@]}"
# The server's wire tables, read from the descriptors just generated (proto/gen_wire.ts).
command -v deno >/dev/null || { echo "proto/gen.sh: deno not found" >&2; exit 2; }
deno run --quiet --allow-read --allow-write --config "$here/../deno.json" "$here/gen_wire.ts" "$out.new"
deno fmt --quiet --config "$here/../deno.json" --ext ts "$out.new/wire/shim_wire.ts" 2>/dev/null || true
if [ "${1:-}" = "--check" ]; then
  if ! diff -r "$out.new" "$here/gen" >/dev/null; then
    echo "proto/gen is stale: run 'deno task gen' and commit the result" >&2
    diff -r "$out.new" "$here/gen" | head -20 >&2
    rm -rf "$out" "$out.new"; exit 1
  fi
  rm -rf "$out" "$out.new"; echo "proto/gen is up to date"
else
  rm -rf "$out" && mv "$out.new" "$out"
  echo "generated ${#files[@]} files into proto/gen"
fi
