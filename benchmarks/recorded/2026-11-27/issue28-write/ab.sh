# A/B: old (efa8d2b, /work/wt/a-old) against new (/work/wt/a), alternating, fresh copies of
# one filled store (9,695 memories of the user) per run.
R=/work/wt/a/benchmarks/recorded/2026-11-27/issue28-write
run() {  # code round extra-args...
  code=$1; round=$2; shift 2
  dir=/work/wt/a; [ "$code" = old ] && dir=/work/wt/a-old
  name=$code-after-write-r$round; case "$*" in *write-every*) name=$code-no-write-r$round;; esac
  data=/tmp/a-bench/ab-$code-r$round
  [ -d "$data" ] || cp -a --sparse=always /tmp/a-bench/template-9695 "$data"
  echo "== $name $(date -u +%T) load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $dir && PYTHONPATH=service:benchmarks /work/main/.venv/bin/python benchmarks/retrieve_after_write.py \
      --fill 10000 --queries 300 --data-dir "$data" --json $R/$name.json "$@" > /dev/null)
  echo "   after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then first=old; second=new; else first=new; second=old; fi
  run $first $r; run $second $r
done
# warm reference (no write before each question), same stores right after
run old 1 --write-every 0; run new 1 --write-every 0
