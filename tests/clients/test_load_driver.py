"""The load harness's Go driver (benchmarks/driver, built as `benchmarks/load.py --driver go`
builds it: GOPATH mode, Debian's packaged grpc-go, the committed stubs) makes the calls it
is asked for against a live memoryd and reports them in ghz's fields."""

from __future__ import annotations

import argparse
import asyncio

import pytest

import load as bench
from memoryd.settings import WorkingSettings
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> bench.GoClients:
    missing = bench.go_missing()
    if missing:
        pytest.skip(f"the Go driver cannot be built here: {missing}")
    return bench.GoClients(bench.build_go_driver(tmp_path_factory.mktemp("go-driver")))


def _args(target: str, total: int, procs: int) -> argparse.Namespace:
    return argparse.Namespace(
        target=target,
        run="t0001",
        procs=procs,
        total=total,
        duration=1.0,
        warmup=0.0,
        driver="go",
    )


async def test_the_go_driver_makes_the_calls_asked_for_and_reports_them_as_ghz_does(
    driver: bench.GoClients, start_server: ServerFactory
) -> None:
    s = await start_server()
    args = _args(f"127.0.0.1:{s.port}", total=7, procs=2)

    # Blocking (it waits for its processes): off the loop, which serves the calls.
    report = await asyncio.to_thread(bench.run_scenario, driver, args, "add_working", 3)

    assert report["name"] == "add_working c=3"
    assert report["count"] == 7
    assert report["statusCodeDistribution"] == {"OK": 7}
    assert report["errorDistribution"] == {}
    assert [d["percentage"] for d in report["latencyDistribution"]] == [10, 25, 50, 75, 90, 95, 99]
    assert 0 < report["fastest"] <= report["average"] <= report["slowest"]
    assert report["rps"] > 0 and report["total"] > 0
    assert report["options"]["driver"] == "go" and report["options"]["processes"] == 2
    assert sum(bucket["count"] for bucket in report["histogram"]) == 7
    # The calls were real: callers 0 and 1 (process 0) made 3 and 2, caller 2 made 2,
    # each writing keys k0, k1, ... for its own user.
    for caller, calls in (("0-0", 3), ("0-1", 2), ("1-2", 2)):
        scope = pb.Scope(user_id=f"bench-t0001-{caller}", agent_id="agent", task_id="t")
        keys = [f"k{i}" for i in range(50)]
        got = await s.stub.Get(pb.GetRequest(scope=scope, tier=pb.TIER_WORKING, keys=keys))
        assert sorted(item.key for item in got.items) == keys[:calls]


async def test_failed_calls_are_counted_by_go_code_name_and_message(
    driver: bench.GoClients, start_server: ServerFactory
) -> None:
    # Working entries need a task: with at most one entry per task the second key fails.
    s = await start_server(working=WorkingSettings(max_entries=1))
    args = _args(f"127.0.0.1:{s.port}", total=3, procs=1)

    report = await asyncio.to_thread(bench.run_scenario, driver, args, "add_working", 1)

    assert report["count"] == 3
    assert report["statusCodeDistribution"] == {"OK": 1, "ResourceExhausted": 2}
    [(message, count)] = report["errorDistribution"].items()
    assert count == 2
    assert message.startswith("rpc error: code = ResourceExhausted desc = ")
