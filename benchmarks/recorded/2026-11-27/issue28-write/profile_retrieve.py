"""cProfile of engine.retrieve in-process on a copy of the 9,695-memory store: warm (no write)
and right after an Add, the event-loop thread only (cProfile sees the calling thread)."""
import asyncio, cProfile, pstats, sys, time, shutil, subprocess
from pathlib import Path
sys.path.insert(0, "/work/wt/a/benchmarks")
import load
from memoryd.app import build_app
from memoryd.settings import Settings
from memoryd.core.models import AddCommand, RetrieveQuery, Scope, Tier

data = Path("/tmp/a-bench/prof/data")
if data.exists():
    shutil.rmtree(data)
subprocess.run(["cp", "-a", "--sparse=always", "/tmp/a-bench/template-9695", str(data)], check=True)

async def main(write: bool) -> None:
    app = await build_app(Settings(data_dir=data))
    scope = Scope(tenant="default", user_id="bench-after-write", agent_id="agent", session_id="s", task_id="t")
    # find the tenant used by load.fill: default tenant of the server
    prof = cProfile.Profile()
    times = []
    for i in range(-5, 150):
        if write:
            await app.engine.add(AddCommand(scope=scope, tier=Tier.LONG_TERM, content=f"{load.fact(7_000_000 + i)} [prof]"))
        q = RetrieveQuery(scope=scope, query=load.question(f"prof-{write}-{i}"), tiers=[Tier.LONG_TERM], top_k=10)
        t0 = time.perf_counter()
        if i >= 0:
            prof.enable()
        r = await app.engine.retrieve(q)
        if i >= 0:
            prof.disable()
            times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print("write" if write else "warm", "n", len(times), "p50", times[len(times)//2], "hits", len(r.items))
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    await app.close()

asyncio.run(main(sys.argv[1] == "write"))
