"""The Python client distribution on its own: it imports nothing of the server, its enums
are the contract's, and its generated modules are the server's classes at run time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd_client import Kind, Operation, PruneStrategy, Role, Source, Tier
from memoryd_client._proto_enum import EnumLike, _ProtoEnum, of_number, to_number
from memoryd_client.v1 import memory_pb2 as client_pb

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_loads_without_the_server_or_its_heavy_dependencies() -> None:
    code = (
        "import json, sys\n"
        "import memoryd_client, memoryd_client.tools, memoryd_client.export_format\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    loaded = set(json.loads(out.stdout))
    heavy = {"memoryd", "torch", "numpy", "qdrant_client", "qdrant_edge", "redis", "pydantic"}
    assert not loaded & heavy, f"the client pulled in {sorted(loaded & heavy)}"


def test_the_client_distribution_declares_only_light_dependencies() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]
    assert project["name"] == "memoryd-client"
    names = {d.split(">")[0].split("<")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert names == {
        "grpcio",
        "grpcio-health-checking",
        "protobuf",
        "googleapis-common-protos",
        "rfc8785",
    }


@pytest.mark.parametrize(
    ("enum", "wrapper"),
    [
        (Tier, client_pb.Tier),
        (Kind, client_pb.Kind),
        (Role, client_pb.Role),
        (Source, client_pb.Source),
        (Operation, client_pb.Operation),
        (PruneStrategy, client_pb.PruneStrategy),
    ],
)
def test_every_enum_member_is_a_contract_value(enum: type[_ProtoEnum], wrapper: object) -> None:
    numbers = sorted(wrapper.values())  # type: ignore[attr-defined]
    assert sorted(m.number for m in enum) == numbers, "the proto gained a value: make gen"
    for number in numbers:
        assert to_number(enum, of_number(enum, number)) == number


def test_enum_arguments_in_every_spelling() -> None:
    spellings: list[EnumLike] = [
        "long_term",
        "LONG_TERM",
        "long-term",
        "TIER_LONG_TERM",
        Tier.LONG_TERM,
        3,
    ]
    assert {to_number(Tier, s) for s in spellings} == {client_pb.TIER_LONG_TERM}
    with pytest.raises(ValueError, match="expected a Tier"):
        to_number(Tier, Kind.FACT)


def test_server_and_client_stubs_are_one_set_of_classes_at_run_time() -> None:
    from memoryd.v1 import memory_pb2 as server_pb

    assert client_pb.DESCRIPTOR is server_pb.DESCRIPTOR
    # Typed as distinct classes (two stub files); the point is that they are one at run time.
    client_class: object = client_pb.MemoryItem
    assert client_class is server_pb.MemoryItem
