"""The export checksum's item form (`item-jcs-v1`, docs/reference/export-format.md): fixed
items give fixed bytes and a fixed digest that other languages can be checked against,
the form survives the JSON-lines files, and the reference page states the same values."""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as pb

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "export-format.md"

# Two items as lines of an export file: every MemoryItem field is set in one of them.
GOLDEN_LINES = [
    r'{"item":{"id":"0b9a4c1e-5f7d-4c2b-9e8a-3d6f1a2b4c5d","tier":"TIER_LONG_TERM","kind":"KIND_PREFERENCE","content":"Ana prefers \"window\" seats\t<na\u00efve> \u2708 \ud83d\ude00\\ \u0001\n","metadata":{"\ud83d\ude00":"emoji","\uff21":"fullwidth A","src":"chat","\u00e9":"1"},"importance":0.8,"createdAt":"2024-01-15T09:00:00.123456789Z","updatedAt":"2024-01-15T09:01:00Z","source":"SOURCE_EXPLICIT","agentId":"planner","deleted":true}}',  # noqa: E501
    r'{"item":{"id":"5e1f0c2d-8a3b-4d6e-b7f9-0a1b2c3d4e5f","tier":"TIER_EPISODIC","kind":"KIND_EPISODE","content":"Task: book a flight","key":"k","score":0.25,"importance":-0.0,"expiresAt":"1969-12-31T23:59:59Z","role":"ROLE_ASSISTANT","sessionId":"chat-1","taskId":"trip","episode":{"task":"book a flight","steps":[{"action":"search","observation":"3 fares"}],"outcome":"booked","success":true},"relation":{"subject":"Ana","predicate":"lives_in","object":"Lyon"},"documentJson":"{\"a\": 1}","archived":true}}',  # noqa: E501
]
GOLDEN_FORMS = [
    '{"agent_id":"planner","archived":false,"content":"Ana prefers \\"window\\" seats\\t<naïve> ✈ 😀\\\\ \\u0001\\n","created_at":{"nanos":123456789,"seconds":"1705309200"},"deleted":true,"document_json":"","episode":null,"expires_at":null,"id":"0b9a4c1e-5f7d-4c2b-9e8a-3d6f1a2b4c5d","importance":"3f4ccccd","key":"","kind":"KIND_PREFERENCE","metadata":{"src":"chat","é":"1","😀":"emoji","Ａ":"fullwidth A"},"relation":null,"role":"ROLE_UNSPECIFIED","score":"00000000","session_id":"","source":"SOURCE_EXPLICIT","task_id":"","tier":"TIER_LONG_TERM","updated_at":{"nanos":0,"seconds":"1705309260"}}\n',  # noqa: E501, RUF001
    '{"agent_id":"","archived":true,"content":"Task: book a flight","created_at":null,"deleted":false,"document_json":"{\\"a\\": 1}","episode":{"outcome":"booked","steps":[{"action":"search","observation":"3 fares"}],"success":true,"task":"book a flight"},"expires_at":{"nanos":0,"seconds":"-1"},"id":"5e1f0c2d-8a3b-4d6e-b7f9-0a1b2c3d4e5f","importance":"00000000","key":"k","kind":"KIND_EPISODE","metadata":{},"relation":{"object":"Lyon","predicate":"lives_in","subject":"Ana"},"role":"ROLE_ASSISTANT","score":"3e800000","session_id":"chat-1","source":"SOURCE_UNSPECIFIED","task_id":"trip","tier":"TIER_EPISODIC","updated_at":null}\n',  # noqa: E501
]
FIRST_FORM_SHA256 = "b4f59768c9559e83ee58c97a6a427d832e432ffdd31de7125688f988ea907c4f"
GOLDEN_CHECKSUM = "1c9a9a7164c4c876b0fe76ba0a5a31d21f88dddb95ec6f4f5cea40c42e6ed623"


def golden_items() -> list[pb.MemoryItem]:
    return [export_stream.from_json_line(line).item for line in GOLDEN_LINES]


def test_the_golden_items_give_their_canonical_forms_and_checksum() -> None:
    items = golden_items()
    forms = [export_stream.canonical_item(item) for item in items]
    assert forms == [form.encode("utf-8") for form in GOLDEN_FORMS]
    assert hashlib.sha256(forms[0]).hexdigest() == FIRST_FORM_SHA256
    checksum = export_stream.Checksum()
    for item in items:
        checksum.add(item)
    trailer = checksum.trailer()
    assert (trailer.item_count, trailer.checksum_format) == (2, "item-jcs-v1")
    assert trailer.checksum_sha256 == GOLDEN_CHECKSUM


def test_no_items_checksum_to_the_sha256_of_nothing() -> None:
    assert export_stream.Checksum().hexdigest() == hashlib.sha256(b"").hexdigest()


def test_the_reference_page_states_the_same_golden_vector() -> None:
    text = DOC.read_text(encoding="utf-8")
    for expected in [*GOLDEN_LINES, *(f.removesuffix("\n") for f in GOLDEN_FORMS)]:
        assert expected in text
    assert FIRST_FORM_SHA256 in text and GOLDEN_CHECKSUM in text


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_reference_pages_javascript_sketch_gives_the_same_bytes(tmp_path: Path) -> None:
    [sketch] = re.findall(r"```js\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    (tmp_path / "canonical.mjs").write_text(sketch, encoding="utf-8")
    (tmp_path / "golden.mjs").write_text(
        'import { readFileSync } from "node:fs";\n'
        'import { canonicalItem, exportChecksum } from "./canonical.mjs";\n'
        'const lines = readFileSync(0, "utf8").split("\\n").filter((l) => l);\n'
        "const items = lines.map((l) => JSON.parse(l).item);\n"
        'process.stdout.write(items.map(canonicalItem).join("") + exportChecksum(items));\n',
        encoding="utf-8",
    )
    result = subprocess.run(
        ["node", "golden.mjs"],
        cwd=tmp_path,
        input="\n".join(GOLDEN_LINES).encode("utf-8"),
        capture_output=True,
        check=True,
    )
    assert result.stdout.decode("utf-8") == "".join(GOLDEN_FORMS) + GOLDEN_CHECKSUM


def _bits(hex_bits: str) -> float:
    return float(struct.unpack(">f", bytes.fromhex(hex_bits))[0])


@pytest.mark.parametrize(
    ("value", "form"),
    [
        (0.8, "3f4ccccd"),
        (-2.5, "c0200000"),
        (math.inf, "7f800000"),
        (0.0, "00000000"),
        (-0.0, "00000000"),  # JSON writers may drop the sign of a zero
        (math.nan, "7fc00000"),
        (_bits("ffc00001"), "7fc00000"),  # any NaN: JSON text keeps no payload
    ],
)
def test_a_float_field_is_written_as_its_binary32_bits(value: float, form: str) -> None:
    value_of = export_stream.canonical_value(pb.MemoryItem(importance=value, score=value))
    assert value_of["importance"] == value_of["score"] == form


def test_absent_messages_are_null_and_present_empty_ones_are_not() -> None:
    absent = export_stream.canonical_value(pb.MemoryItem())
    present = pb.MemoryItem(episode=pb.Episode(), relation=pb.Relation())
    present.created_at.SetInParent()  # the epoch, not "no time"
    value = export_stream.canonical_value(present)
    assert (absent["created_at"], absent["episode"], absent["relation"]) == (None, None, None)
    assert value["created_at"] == {"seconds": "0", "nanos": 0}
    assert value["episode"] == {"task": "", "steps": [], "outcome": "", "success": False}
    assert value["relation"] == {"subject": "", "predicate": "", "object": ""}


def test_an_enum_value_memory_proto_does_not_name_is_written_as_its_number() -> None:
    assert export_stream.canonical_value(pb.MemoryItem(kind=99))["kind"] == 99  # type: ignore[arg-type]


def test_the_form_survives_the_json_lines_of_export_files() -> None:
    odd = pb.MemoryItem(id="x", importance=math.nan, score=-0.0, metadata={"": ""})
    odd.expires_at.FromNanoseconds(-1)  # before the epoch, with nanos
    odd.updated_at.SetInParent()
    for item in [*golden_items(), odd]:
        line = export_stream.to_json_line(pb.ExportResponse(item=item))
        back = export_stream.from_json_line(line).item
        assert export_stream.canonical_item(back) == export_stream.canonical_item(item)
