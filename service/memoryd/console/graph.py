"""The entity tier as a picture: entities on a circle, relations as arrows between them,
closed relations (a newer contradicting one replaced them) dashed and marked. Only the
layout is computed here; the template draws it as inline SVG (escaped like any text)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from memoryd.v1 import memory_pb2 as pb

SIZE = 640
NODE_RADIUS = 22
_RADIUS = 250


@dataclass(frozen=True)
class Node:
    name: str
    kind: str
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    subject: str
    object: str
    label: str
    closed: bool
    x1: float
    y1: float
    x2: float
    y2: float

    @property
    def mid(self) -> tuple[float, float]:
        return (self.x1 + self.x2) / 2, (self.y1 + self.y2) / 2


@dataclass(frozen=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    size: int = SIZE


def layout(items: Iterable[pb.MemoryItem]) -> Graph:
    kinds: dict[str, str] = {}
    relations: list[pb.Relation] = []
    for item in items:
        if item.HasField("entity"):
            kinds.setdefault(item.entity.name, item.entity.type)
        if item.HasField("relation"):
            relations.append(item.relation)
    for r in relations:
        kinds.setdefault(r.subject, "")
        kinds.setdefault(r.object, "")
    names = sorted(kinds)
    centre = SIZE / 2
    at: dict[str, tuple[float, float]] = {}
    for i, name in enumerate(names):
        angle = 2 * math.pi * i / max(1, len(names)) - math.pi / 2
        radius = 0 if len(names) == 1 else _RADIUS
        at[name] = (centre + radius * math.cos(angle), centre + radius * math.sin(angle))
    nodes = [Node(n, kinds[n], *at[n]) for n in names]
    edges = [
        Edge(
            r.subject,
            r.object,
            f"{r.predicate} (closed)" if r.HasField("invalid_at") else r.predicate,
            r.HasField("invalid_at"),
            *_between(at[r.subject], at[r.object]),
        )
        for r in relations
    ]
    return Graph(nodes, edges)


def _between(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, ...]:
    """The arrow from circle to circle (not centre to centre, where the head would hide)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length * NODE_RADIUS, dy / length * NODE_RADIUS
    return a[0] + ux, a[1] + uy, b[0] - ux, b[1] - uy
