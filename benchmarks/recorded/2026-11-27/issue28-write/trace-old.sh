set -x
R=/work/wt/a/benchmarks/recorded/2026-11-27/issue28-write
cd /work/wt/a-old
rm -rf /tmp/a-bench/trace-old-w && cp -a --sparse=always /tmp/a-bench/template-9695 /tmp/a-bench/trace-old-w
uptime
PYTHONPATH=service:benchmarks /work/main/.venv/bin/python benchmarks/retrieve_after_write.py --fill 10000 --queries 300 --trace-store --data-dir /tmp/a-bench/trace-old-w --json $R/trace-old-after-write.json > /dev/null
uptime
PYTHONPATH=service:benchmarks /work/main/.venv/bin/python benchmarks/retrieve_after_write.py --fill 10000 --queries 300 --trace-store --write-every 0 --data-dir /tmp/a-bench/trace-old-w --json $R/trace-old-no-write.json > /dev/null
uptime
