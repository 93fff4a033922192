#!/usr/bin/env bash
# Generate the clients' code from proto/: the Python client's enum classes from the
# generated stubs' descriptors (scripts/gen_client_enums.py; the stubs themselves come from
# gen_stubs.sh), and the TypeScript and Go code with buf and local plugins (nothing is
# downloaded): protoc-gen-es from clients/typescript/node_modules (npm ci), and Debian's
# protoc-gen-go / protoc-gen-go-grpc. The error details (google/rpc/*.proto) come from the
# googleapis-common-protos Python package.
#   gen_clients.sh [python|typescript|go|all] [OUT_ROOT]
# OUT_ROOT (default: the repository) lets the staleness tests generate into a temp dir.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
which="${1:-all}"
out="$(cd "${2:-$here}" && pwd)"
cd "$here"
py="${PYTHON:-.venv/bin/python}"
buf="${BUF:-$(dirname "$py")/buf}"

if [[ "$which" == python || "$which" == all ]]; then
  mkdir -p "$out/clients/python/memoryd_client"
  "$py" scripts/gen_client_enums.py "$out/clients/python/memoryd_client/_enums.py"
  [[ "$which" == python ]] && exit 0
fi

rpc_protos="$("$py" -c 'import os, google.rpc.status_pb2 as m; print(os.path.dirname(m.__file__))')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rpc/google/rpc"
cp "$rpc_protos/status.proto" "$rpc_protos/error_details.proto" "$work/rpc/google/rpc/"

if [[ "$which" == typescript || "$which" == all ]]; then
  plugin="$here/clients/typescript/node_modules/.bin/protoc-gen-es"
  [[ -x "$plugin" ]] || { echo "run npm ci in clients/typescript first" >&2; exit 1; }
  dest="$out/clients/typescript/src/gen"
  rm -rf "$dest"
  template="{\"version\":\"v2\",\"plugins\":[{\"local\":\"$plugin\",\"out\":\"$dest\",\"opt\":[\"target=ts\",\"import_extension=js\"]}]}"
  "$buf" generate --template "$template" proto
  "$buf" generate --template "$template" "$work/rpc"
fi

if [[ "$which" == go || "$which" == all ]]; then
  dest="$out/clients/go/memorydv1"
  rm -rf "$dest"
  mkdir -p "$dest"
  map="Mmemoryd/v1/memory.proto=memoryd.dev/client/memorydv1"
  template="{\"version\":\"v2\",\"plugins\":[
    {\"local\":\"protoc-gen-go\",\"out\":\"$dest\",\"opt\":[\"paths=import\",\"$map\",\"module=memoryd.dev/client/memorydv1\"]},
    {\"local\":\"protoc-gen-go-grpc\",\"out\":\"$dest\",\"opt\":[\"paths=import\",\"$map\",\"module=memoryd.dev/client/memorydv1\"]}]}"
  "$buf" generate --template "$template" proto
fi
