"""Reading a server's /metrics the way Prometheus does: over HTTP, in the text format."""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# The sample names a family of each type exposes, besides its own name.
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Scrape:
    text: str
    samples: list[Sample]
    # Every metric name a query could use: families and their sample names.
    names: set[str]

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when absent (as a counter never incremented)."""
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        return 0.0

    def total(self, name: str, **labels: str) -> float:
        """The sum over every sample of `name` matching `labels`."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        body: bytes = reply.read()
        return body.decode()


async def scrape(port: int) -> Scrape:
    text = await asyncio.to_thread(_get, port)
    samples: list[Sample] = []
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        for s in family.samples:
            names.add(s.name)
            samples.append(Sample(s.name, dict(s.labels), s.value))
    return Scrape(text, samples, names)
