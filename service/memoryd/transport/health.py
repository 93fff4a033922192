"""grpc.health.v1.Health: one status per store component, per service, and overall.

A background loop probes the stores, so Check answers from memory and never waits on them.
Besides each probe's own name, `services` names statuses that follow some probes (a tier's
follows its store's), and `report` is told every probe's result (the store-up metric).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2 as hpb

from memoryd.core.tasks import stop_task

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]
Report = Callable[[str, bool], None]

SERVICE_NAME = "memoryd.v1.MemoryService"
# SERVING from start to shutdown whatever the stores do: it answers only while the process
# and its event loop do, which is all a liveness probe should ask (readiness asks
# SERVICE_NAME, which follows the stores; restarting a replica does not bring a store back).
LIVENESS_NAME = "memoryd.liveness"


class HealthMonitor:
    def __init__(
        self,
        probes: Mapping[str, Probe],
        interval_s: float,
        probe_timeout_s: float = 2.0,
        services: Mapping[str, Sequence[str]] | None = None,
        report: Report | None = None,
    ) -> None:
        self.servicer = health_aio.HealthServicer()
        self._probes = dict(probes)
        self._services = dict(services or {})
        self._report = report
        self._interval = interval_s
        self._timeout = probe_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._last: dict[str, bool] = {}

    async def start(self) -> None:
        await self.servicer.set(LIVENESS_NAME, hpb.HealthCheckResponse.SERVING)
        await self.check_now()
        self._task = asyncio.create_task(self._loop(), name="health-monitor")

    async def check_now(self) -> dict[str, bool]:
        results = await asyncio.gather(*(self._probe(n, p) for n, p in self._probes.items()))
        states = dict(zip(self._probes, results, strict=True))
        for name, up in states.items():
            if self._last.get(name) != up:
                log.log(logging.INFO if up else logging.WARNING, "%s is %s", name, _word(up))
            await self.servicer.set(name, _status(up))
            if self._report is not None:
                self._report(name, up)
        for service, needs in self._services.items():
            await self.servicer.set(service, _status(all(states.get(n, False) for n in needs)))
        ready = all(states.values())
        await self.servicer.set(SERVICE_NAME, _status(ready))
        await self.servicer.set("", _status(ready))
        self._last = states
        return states

    async def _probe(self, name: str, probe: Probe) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                return await probe()
        except Exception:
            log.debug("health probe %s failed", name, exc_info=True)
            return False

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check_now()

    async def shutdown(self) -> None:
        """Turn NOT_SERVING first, so load balancers stop sending before the server stops."""
        task, self._task = self._task, None
        await stop_task(task)
        await self.servicer.enter_graceful_shutdown()


def _status(up: bool) -> hpb.HealthCheckResponse.ServingStatus.ValueType:
    return hpb.HealthCheckResponse.SERVING if up else hpb.HealthCheckResponse.NOT_SERVING


def _word(up: bool) -> str:
    return "up" if up else "DOWN"
