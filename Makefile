# Two commands on a fresh machine: `make run` serves on the embedded defaults,
# `make test` runs the tests. Everything else here is for developers.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: run test install redis gen docs lint format eval bench clean

run: install
	$(VENV)/bin/memoryd serve

test: install redis
	$(PY) -m pytest

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch first, pinned: on these machines 2.13.0 is the local CPU build; anything else would
# pull several GB of CUDA packages.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[local,openai,dev]"
	$(VENV)/bin/memoryd prepare-embedder
	touch $(STAMP)

install: $(STAMP)

# The tests start their own private redis-server; only the binary is needed.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) \
	  || (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server); }

# The retrieval evaluation on the golden set; exits non-zero below its thresholds.
eval: install
	PYTHONPATH=service $(PY) evals/run_eval.py
	PYTHONPATH=service $(PY) evals/run_longconv.py --min-recall 0.55

# The load harness against a server it starts (benchmarks/load.py; BENCH_ARGS to narrow it,
# e.g. BENCH_ARGS="-z 5s --scenarios add_long_term,retrieve_new"). Reports go to
# benchmarks/results/<time>/; results so far are in benchmarks/RESULTS.md.
bench: install
	PYTHONPATH=service $(PY) benchmarks/load.py --start-server $(BENCH_ARGS)

gen: install
	PYTHON=$(PY) bash scripts/gen_stubs.sh
	PYTHONPATH=service $(PY) scripts/gen_docs.py

# The generated reference documents under docs/reference/ (a unit test fails when stale).
docs: install
	PYTHONPATH=service $(PY) scripts/gen_docs.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/buf lint

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .memoryd-data .pytest_cache .mypy_cache .ruff_cache
