"""A/B two running servers: rounds alternate between them, each run a fixed number of
calls (no warm-up) through benchmarks/load.py, and the server's own CPU time per call
(user + system of its process, from /proc) is printed beside latency and RPS. CPU per
call moves far less with the machine's load than latency does.

    PYTHONPATH=service .venv/bin/python benchmarks/ab_server_cpu.py \\
        --a 127.0.0.1:50161:<pid> --b 127.0.0.1:50162:<pid> --rounds 3 -n 6000 \\
        --scenario add_working -c 1,50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--a", required=True, help="host:port:pid of server A")
    p.add_argument("--b", required=True, help="host:port:pid of server B")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", "--total", type=int, default=6000, help="calls per run")
    p.add_argument("-c", "--concurrency", default="1,50")
    p.add_argument("--scenario", default="add_working")
    p.add_argument("--driver", default="auto")
    p.add_argument("--out", type=Path, help="keep the reports here")
    p.add_argument("--json", type=Path, help="write the rounds here")
    args = p.parse_args()
    rows: list[dict[str, object]] = []
    out = args.out or Path(tempfile.mkdtemp(prefix="memoryd-ab-"))
    sides = {}
    for side, spec in (("A", args.a), ("B", args.b)):
        target, _, pid = spec.rpartition(":")
        sides[side] = (target, int(pid))
    for r in range(1, args.rounds + 1):
        for side, (target, pid) in sides.items():
            for c in (int(x) for x in args.concurrency.split(",")):
                run_dir = out / f"{side}-{r}-c{c}"
                load = os.getloadavg()[0]
                before = cpu_seconds(pid)
                subprocess.run(
                    [
                        sys.executable,
                        str(HERE / "load.py"),
                        f"--target={target}",
                        f"--driver={args.driver}",
                        f"-c={c}",
                        f"-n={args.total}",
                        "--warmup=0s",
                        f"--scenarios={args.scenario}",
                        f"--out={run_dir}",
                    ],
                    check=True,
                    capture_output=True,
                )
                used = cpu_seconds(pid) - before
                report = json.loads((run_dir / f"{args.scenario}-c{c}.json").read_text())
                ms = {d["percentage"]: d["latency"] / 1e6 for d in report["latencyDistribution"]}
                cpu_us = used / report["count"] * 1e6
                rows.append(
                    {
                        "side": side,
                        "round": r,
                        "scenario": args.scenario,
                        "concurrency": c,
                        "count": report["count"],
                        "rps": report["rps"],
                        "p50_ms": ms[50],
                        "p99_ms": ms[99],
                        "server_cpu_us_per_call": cpu_us,
                        "loadavg": load,
                    }
                )
                print(
                    f"{side} round {r} {args.scenario} c={c:<3d} rps {report['rps']:6.0f} "
                    f"p50 {ms[50]:.3f} p99 {ms[99]:.3f} ms  server CPU "
                    f"{cpu_us:4.0f} us/call  load {load:.1f}",
                    flush=True,
                )
    print(f"reports in {out}")
    if args.json:
        args.json.write_text(json.dumps({"reports": str(out), "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
