#!/usr/bin/env bash
# Generate the Python stubs (and .pyi) from proto/: the server's into SERVER_OUT (default
# service/, as memoryd.v1) and the client distribution's copy into CLIENT_OUT (default
# clients/python/, as memoryd_client.v1). The copy is this same output with its one
# cross-module import renamed, so both stay byte-for-byte one generation (docs/adr/0200).
#   gen_stubs.sh [SERVER_OUT [CLIENT_OUT]]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-service}"
client_out="${2:-clients/python}"
cd "$here"
py="${PYTHON:-.venv/bin/python}"
bin="$(dirname "$py")"
mkdir -p "$out"
PATH="$bin:$PATH" "$py" -m grpc_tools.protoc -Iproto \
  --python_out="$out" --mypy_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
  proto/memoryd/v1/*.proto
touch "$out/memoryd/v1/__init__.py"

mkdir -p "$client_out/memoryd_client/v1"
for f in "$out"/memoryd/v1/*.py "$out"/memoryd/v1/*.pyi; do
  sed 's/^from memoryd\.v1 import /from memoryd_client.v1 import /' "$f" \
    > "$client_out/memoryd_client/v1/$(basename "$f")"
done
