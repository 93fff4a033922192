#!/usr/bin/env bash
# Generate the Python stubs (and .pyi) from proto/ into the directory given (default service/).
set -euo pipefail
out="${1:-service}"
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
py="${PYTHON:-.venv/bin/python}"
bin="$(dirname "$py")"
mkdir -p "$out"
PATH="$bin:$PATH" "$py" -m grpc_tools.protoc -Iproto \
  --python_out="$out" --mypy_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
  proto/memoryd/v1/*.proto
touch "$out/memoryd/v1/__init__.py"
