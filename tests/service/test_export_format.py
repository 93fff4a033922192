"""The export checksum's item form (`item-jcs-v1`, docs/reference/export-format.md): a
value derived from the protobuf descriptor, so that every field is covered and a field at
its default changes no digest. Fixed items give fixed bytes and a fixed digest that other
languages are checked against, and the reference page states the same values."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf import timestamp_pb2 as timestamp
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as pb

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "export-format.md"

# Two items as lines of an export file. The first sets every MemoryItem field (entity,
# history and a relation's validity included); the second is mostly defaults, written as a
# writer that prints defaults would, with an enum number memory.proto does not name.
GOLDEN_LINES = [
    r'{"item":{"id":"0b9a4c1e-5f7d-4c2b-9e8a-3d6f1a2b4c5d","tier":"TIER_LONG_TERM","kind":"KIND_PREFERENCE","content":"Ana prefers \"window\" seats\t<na\u00efve> \u2708 \ud83d\ude00\\ \u0001\n","key":"seat","score":0.25,"metadata":{"\ud83d\ude00":"emoji","\uff21":"fullwidth A","src":"chat","\u00e9":"1"},"importance":0.8,"createdAt":"2024-01-15T09:00:00.123456789Z","updatedAt":"2024-01-15T09:01:00Z","expiresAt":"1969-12-31T23:59:59Z","source":"SOURCE_EXPLICIT","role":"ROLE_ASSISTANT","agentId":"planner","sessionId":"chat-1","taskId":"trip","episode":{"task":"book a flight","steps":[{"action":"search","observation":"3 fares"},{}],"outcome":"booked","success":true},"relation":{"subject":"Ana","predicate":"lives_in","object":"Lyon","validFrom":"2023-06-01T00:00:00Z","invalidAt":"2024-01-15T09:00:00.500Z"},"documentJson":"{\"a\": 1}","archived":true,"deleted":true,"entity":{"name":"Ana","type":"person","aliases":["Ana M.",""],"description":"a traveller","relations":[{"subject":"Ana","predicate":"works_at","object":"Acme","validFrom":"1970-01-01T00:00:00Z"}]},"history":[{"content":"Ana prefers aisle seats","source":"SOURCE_AUTO","replacedAt":"2023-12-01T10:00:00Z"},{"content":"Ana has no seat preference"}]}}',  # noqa: E501
    r'{"item":{"id":"5e1f0c2d-8a3b-4d6e-b7f9-0a1b2c3d4e5f","tier":"TIER_WORKING","kind":99,"content":"","key":"","score":"NaN","importance":-0.0,"metadata":{},"createdAt":"1970-01-01T00:00:00Z","role":"ROLE_UNSPECIFIED","relation":{},"archived":false,"history":[]}}',
]
GOLDEN_FORMS = [
    '{"agent_id":"planner","archived":true,"content":"Ana prefers \\"window\\" seats\\t<naïve> ✈ 😀\\\\ \\u0001\\n","created_at":{"nanos":123456789,"seconds":"1705309200"},"deleted":true,"document_json":"{\\"a\\": 1}","entity":{"aliases":["Ana M.",""],"description":"a traveller","name":"Ana","relations":[{"object":"Acme","predicate":"works_at","subject":"Ana","valid_from":{}}],"type":"person"},"episode":{"outcome":"booked","steps":[{"action":"search","observation":"3 fares"},{}],"success":true,"task":"book a flight"},"expires_at":{"seconds":"-1"},"history":[{"content":"Ana prefers aisle seats","replaced_at":{"seconds":"1701424800"},"source":"SOURCE_AUTO"},{"content":"Ana has no seat preference"}],"id":"0b9a4c1e-5f7d-4c2b-9e8a-3d6f1a2b4c5d","importance":"3f4ccccd","key":"seat","kind":"KIND_PREFERENCE","metadata":{"src":"chat","é":"1","😀":"emoji","Ａ":"fullwidth A"},"relation":{"invalid_at":{"nanos":500000000,"seconds":"1705309200"},"object":"Lyon","predicate":"lives_in","subject":"Ana","valid_from":{"seconds":"1685577600"}},"role":"ROLE_ASSISTANT","score":"3e800000","session_id":"chat-1","source":"SOURCE_EXPLICIT","task_id":"trip","tier":"TIER_LONG_TERM","updated_at":{"seconds":"1705309260"}}\n',  # noqa: E501, RUF001
    '{"created_at":{},"id":"5e1f0c2d-8a3b-4d6e-b7f9-0a1b2c3d4e5f","kind":99,"relation":{},"score":"7fc00000","tier":"TIER_WORKING"}\n',
]
FIRST_FORM_SHA256 = "1e050c6d7553703131186e61f7db0b0f632c92e0827f7942546e99a663bcbf51"
GOLDEN_CHECKSUM = "e72ce64de91cf9cebe8ce2f9f7f4de4dc5fb594a5ef716eeea79f1f121da8a49"

# Every kind of field that MemoryItem does not use (yet), in a message built at run time.
SAMPLE_PROTO = """
name: "export_form_sample.proto" package: "sample" syntax: "proto3"
message_type {
  name: "Sample"
  field { name: "i32" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
  field { name: "u32" number: 2 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "s32" number: 3 label: LABEL_OPTIONAL type: TYPE_SINT32 }
  field { name: "i64" number: 4 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "u64" number: 5 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "s64" number: 6 label: LABEL_OPTIONAL type: TYPE_SINT64 }
  field { name: "f64" number: 7 label: LABEL_OPTIONAL type: TYPE_FIXED64 }
  field { name: "sf64" number: 8 label: LABEL_OPTIONAL type: TYPE_SFIXED64 }
  field { name: "d" number: 9 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
  field { name: "doubles" number: 10 label: LABEL_REPEATED type: TYPE_DOUBLE }
  field { name: "b" number: 11 label: LABEL_OPTIONAL type: TYPE_BYTES }
  field { name: "by_number" number: 12 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".sample.Sample.ByNumberEntry" }
  field { name: "by_flag" number: 13 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".sample.Sample.ByFlagEntry" }
  field { name: "text" number: 14 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
  field { name: "count" number: 15 label: LABEL_OPTIONAL type: TYPE_INT32 oneof_index: 0 }
  field { name: "maybe" number: 16 label: LABEL_OPTIONAL type: TYPE_FLOAT oneof_index: 1
          proto3_optional: true }
  nested_type {
    name: "ByNumberEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
  }
  nested_type {
    name: "ByFlagEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".sample.Sample" }
  }
  oneof_decl { name: "choice" }
  oneof_decl { name: "_maybe" }
}
"""


def _message_class(files: list[descriptor_pb2.FileDescriptorProto], name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


Sample: Any = _message_class(
    [text_format.Parse(SAMPLE_PROTO, descriptor_pb2.FileDescriptorProto())], "sample.Sample"
)


def older_memory_item(dropped: dict[str, set[str]]) -> Any:
    """MemoryItem as a client built on an older memory.proto knows it: without the fields
    `dropped` names, per message."""
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    for message in file.message_type:
        kept = [f for f in message.field if f.name not in dropped.get(message.name, set())]
        del message.field[:]
        message.field.extend(kept)
    timestamps = descriptor_pb2.FileDescriptorProto()
    timestamp.DESCRIPTOR.CopyToProto(timestamps)
    return _message_class([timestamps, file], "memoryd.v1.MemoryItem")


def golden_items() -> list[pb.MemoryItem]:
    return [export_stream.from_json_line(line).item for line in GOLDEN_LINES]


def digest(message: Message) -> str:
    return hashlib.sha256(export_stream.canonical_item(message)).hexdigest()


# --- the golden vector, here, on the reference page and in its JavaScript ----------------


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


_SCALAR_TYPES = {
    getattr(FieldDescriptor, n): n.removeprefix("TYPE_").lower()
    for n in dir(FieldDescriptor)
    if n.startswith("TYPE_")
}


def sketch_tables(root: Descriptor) -> dict[str, Any]:
    """The field table of the JavaScript sketch, as the descriptor states it: per message
    (by short name) its fields' types as in a .proto, per enum its value names by number."""
    messages: dict[str, dict[str, str]] = {}
    enums: dict[str, list[str]] = {}
    full_names: dict[str, str] = {}

    def type_of(field: FieldDescriptor) -> str:
        if field.enum_type is not None:
            values = sorted(field.enum_type.values, key=lambda v: v.number)
            assert [v.number for v in values] == list(range(len(values))), "names by number"
            enums[field.enum_type.name] = [v.name for v in values]
            return field.enum_type.name
        if field.message_type is not None:
            visit(field.message_type)
            return field.message_type.name
        return _SCALAR_TYPES[field.type]

    def visit(message: Descriptor) -> None:
        if full_names.setdefault(message.name, message.full_name) != message.full_name:
            raise AssertionError(f"two messages named {message.name}: the table needs full names")
        if message.name in messages:
            return
        fields = messages[message.name] = {}
        for field in message.fields:
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
                fields[field.name] = f"map<{type_of(key)}, {type_of(value)}>"
            elif field.is_repeated:
                fields[field.name] = f"repeated {type_of(field)}"
            elif field.has_presence and field.message_type is None:
                fields[field.name] = f"optional {type_of(field)}"
            else:
                fields[field.name] = type_of(field)

    visit(root)
    return {"MESSAGES": messages, "ENUMS": enums}


def run_sketch(tmp_path: Path, main: str, stdin: str = "") -> str:
    """Runs `main` (JavaScript) next to the reference page's sketch, as canonical.mjs."""
    [sketch] = re.findall(r"```js\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    # The tables are the sketch's own; exported here only to compare them.
    module = sketch + "export { MESSAGES, ENUMS };\n"
    (tmp_path / "canonical.mjs").write_text(module, encoding="utf-8")
    (tmp_path / "main.mjs").write_text(main, encoding="utf-8")
    result = subprocess.run(
        ["node", "main.mjs"], cwd=tmp_path, input=stdin.encode(), capture_output=True, check=True
    )
    return result.stdout.decode("utf-8")


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")


@needs_node
def test_the_reference_pages_javascript_sketch_gives_the_same_bytes(tmp_path: Path) -> None:
    main = (
        'import { readFileSync } from "node:fs";\n'
        'import { canonicalItem, exportChecksum } from "./canonical.mjs";\n'
        'const lines = readFileSync(0, "utf8").split("\\n").filter((l) => l);\n'
        "const items = lines.map((l) => JSON.parse(l).item);\n"
        'process.stdout.write(items.map(canonicalItem).join("") + exportChecksum(items));\n'
    )
    expected = "".join(GOLDEN_FORMS) + GOLDEN_CHECKSUM
    assert run_sketch(tmp_path, main, "\n".join(GOLDEN_LINES)) == expected
    # The same items as memoryd writes them in export files.
    lines = [export_stream.to_json_line(pb.ExportResponse(item=i)) for i in golden_items()]
    assert run_sketch(tmp_path, main, "\n".join(lines)) == expected


@needs_node
def test_the_sketchs_field_table_is_memory_protos(tmp_path: Path) -> None:
    main = (
        'import { MESSAGES, ENUMS } from "./canonical.mjs";\n'
        "process.stdout.write(JSON.stringify({ MESSAGES, ENUMS }));\n"
    )
    tables = json.loads(run_sketch(tmp_path, main))
    expected = sketch_tables(pb.MemoryItem.DESCRIPTOR)
    assert tables == expected, (
        "update the tables of the sketch in docs/reference/export-format.md to: "
        + json.dumps(expected)
    )


# --- the rules ---------------------------------------------------------------------------


def test_a_field_without_presence_at_its_default_is_left_out() -> None:
    defaults = pb.MemoryItem(
        id="", tier=pb.TIER_UNSPECIFIED, score=0.0, importance=-0.0, metadata={}, archived=False
    )
    assert export_stream.canonical_value(defaults) == {}
    assert export_stream.canonical_item(defaults) == b"{}\n"
    # List elements and map values are never left out, whatever their value.
    kept = pb.MemoryItem(
        metadata={"": ""}, entity=pb.Entity(aliases=[""]), history=[pb.FactVersion()]
    )
    assert export_stream.canonical_value(kept) == {
        "metadata": {"": ""},
        "entity": {"aliases": [""]},
        "history": [{}],
    }


def test_a_field_with_presence_is_written_exactly_when_set_even_at_its_default() -> None:
    assert export_stream.canonical_value(Sample()) == {}
    assert export_stream.canonical_value(Sample(maybe=0.0)) == {"maybe": "00000000"}
    assert export_stream.canonical_value(Sample(text="")) == {"text": ""}
    assert export_stream.canonical_value(Sample(count=0)) == {"count": 0}
    # A message: absent is left out, present is an object, {} when it holds only defaults.
    present = pb.MemoryItem(episode=pb.Episode(), relation=pb.Relation())
    present.created_at.SetInParent()  # the epoch, not "no time"
    present.relation.valid_from.FromSeconds(60)
    assert export_stream.canonical_value(present) == {
        "created_at": {},
        "episode": {},
        "relation": {"valid_from": {"seconds": "60"}},
    }


def _bits(hex_bits: str, layout: str = ">f") -> float:
    return float(struct.unpack(layout, bytes.fromhex(hex_bits))[0])


@pytest.mark.parametrize(
    ("value", "form"),
    [
        (0.8, "3f4ccccd"),
        (-2.5, "c0200000"),
        (math.inf, "7f800000"),
        (-math.inf, "ff800000"),
        (math.nan, "7fc00000"),
        (_bits("ffc00001"), "7fc00000"),  # any NaN: JSON text keeps no payload
    ],
)
def test_a_float_field_is_written_as_its_binary32_bits(value: float, form: str) -> None:
    value_of = export_stream.canonical_value(pb.MemoryItem(importance=value, score=value))
    assert value_of == {"importance": form, "score": form}


@pytest.mark.parametrize(
    ("value", "form"),
    [
        (0.1, "3fb999999999999a"),
        (-math.inf, "fff0000000000000"),
        (math.nan, "7ff8000000000000"),
        (_bits("fff8000000000001", ">d"), "7ff8000000000000"),
    ],
)
def test_a_double_field_is_written_as_its_binary64_bits(value: float, form: str) -> None:
    assert export_stream.canonical_value(Sample(d=value)) == {"d": form}


def test_either_zero_is_a_floats_default_and_written_as_plus_zero_where_kept() -> None:
    # JSON writers may drop the sign of a zero, so -0 cannot count as set.
    assert export_stream.canonical_value(pb.MemoryItem(importance=-0.0, score=0.0)) == {}
    assert export_stream.canonical_value(Sample(d=-0.0)) == {}
    kept = Sample(maybe=-0.0, doubles=[-0.0, 0.0])
    assert export_stream.canonical_value(kept) == {
        "maybe": "00000000",
        "doubles": ["0000000000000000", "0000000000000000"],
    }


def test_64_bit_integers_are_decimal_strings_and_32_bit_ones_numbers() -> None:
    extremes = Sample(
        i64=-(2**63),
        u64=2**64 - 1,
        s64=-1,
        f64=2**53 + 1,  # not a binary64 number: as a JSON number it would change
        sf64=-(2**53 + 1),
        i32=-(2**31),
        u32=2**32 - 1,
        s32=-1,
    )
    assert export_stream.canonical_item(extremes) == (
        b'{"f64":"9007199254740993","i32":-2147483648,"i64":"-9223372036854775808",'
        b'"s32":-1,"s64":"-1","sf64":"-9007199254740993","u32":4294967295,'
        b'"u64":"18446744073709551615"}\n'
    )
    # A Timestamp is a message like any other: int64 seconds, int32 nanos.
    item = pb.MemoryItem()
    item.expires_at.FromNanoseconds(-1)
    assert export_stream.canonical_value(item) == {
        "expires_at": {"seconds": "-1", "nanos": 999_999_999}
    }


def test_bytes_are_standard_base64_and_map_keys_are_strings() -> None:
    sample = Sample(
        b=b"\xfb\xff",
        by_number={-1: "a", 0: ""},
        by_flag={True: Sample(), False: Sample(i32=1)},
    )
    assert export_stream.canonical_value(sample) == {
        "b": "+/8=",
        "by_number": {"-1": "a", "0": ""},
        "by_flag": {"true": {}, "false": {"i32": 1}},
    }


def test_an_enum_value_memory_proto_does_not_name_is_written_as_its_number() -> None:
    item = pb.MemoryItem(kind=99, history=[pb.FactVersion(source=7)])  # type: ignore[arg-type]
    assert export_stream.canonical_value(item) == {"kind": 99, "history": [{"source": 7}]}
    named = pb.MemoryItem(kind=pb.KIND_FACT, history=[pb.FactVersion(source=pb.SOURCE_AUTO)])
    assert export_stream.canonical_value(named) == {
        "kind": "KIND_FACT",
        "history": [{"source": "SOURCE_AUTO"}],
    }


def test_the_form_survives_the_json_lines_of_export_files() -> None:
    odd = pb.MemoryItem(id="x", importance=math.nan, score=-0.0, metadata={"": ""})
    odd.expires_at.FromNanoseconds(-1)  # before the epoch, with nanos
    odd.updated_at.SetInParent()
    odd.history.add().replaced_at.SetInParent()
    for item in [*golden_items(), odd]:
        line = export_stream.to_json_line(pb.ExportResponse(item=item))
        back = export_stream.from_json_line(line).item
        assert export_stream.canonical_item(back) == export_stream.canonical_item(item)


# --- every field is covered, and older contracts still verify ------------------------------

Change = Callable[[Message], None]
Reach = Callable[[Message], Any]


def _samples(field: FieldDescriptor) -> list[Any]:
    """A scalar field's default, then values that are not (their forms all differ)."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_BOOL:
        return [False, True]
    if kind == FieldDescriptor.TYPE_STRING:
        return ["", "a", "b"]
    if kind == FieldDescriptor.TYPE_BYTES:
        return [b"", b"a", b"b"]
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return [0.0, 0.5, -1.5]
    return [0, 1, 2]  # integers and enum numbers


def _present(message: Any) -> Any:
    message.SetInParent()
    return message


def _first(elements: Any) -> Any:
    return elements[0] if elements else elements.add()


def _entry(key: Any) -> Callable[[Any], object]:
    return lambda held: held.get_or_create(key)


def _put(key: Any, value: Any) -> Callable[[Any], object]:
    return lambda held: held.update({key: value})


def _append(value: Any) -> Callable[[Any], object]:
    return lambda held: held.append(value)


def field_cases(
    descriptor: Descriptor, reach: Reach, path: str = "", seen: frozenset[str] = frozenset()
) -> Iterator[tuple[str, list[Change]]]:
    """For every field reachable from `descriptor` (found in an item by `reach`): changes
    of an empty item that must give pairwise different digests. A message that holds
    itself is walked once."""
    if descriptor.full_name in seen:
        return
    for field in descriptor.fields:
        label = path + field.name
        yield from _cases_of(field, reach, label, seen | {descriptor.full_name})


def _cases_of(
    field: FieldDescriptor, reach: Reach, label: str, seen: frozenset[str]
) -> Iterator[tuple[str, list[Change]]]:
    name = field.name

    def on_field(change: Callable[[Any], object]) -> Change:
        def apply(item: Message) -> None:
            change(getattr(reach(item), name))

        return apply

    def assign(value: Any) -> Change:
        return lambda item: setattr(reach(item), name, value)

    untouched = on_field(lambda held: None)  # its parents present, the field itself not
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
        keys = _samples(key_field)
        if value_field.message_type is not None:
            entries = [on_field(_entry(k)) for k in keys]
            yield label, [untouched, *entries]

            def value_at(item: Message) -> Any:
                return getattr(reach(item), name).get_or_create(keys[0])

            yield from field_cases(value_field.message_type, value_at, f"{label}{{}}.", seen)
        else:
            default, *others = _samples(value_field)
            puts = [(k, default) for k in keys] + [(keys[0], v) for v in others]
            entries = [on_field(_put(k, v)) for k, v in puts]
            yield label, [untouched, *entries]
    elif entry is not None and field.is_repeated:
        yield label, [untouched, on_field(lambda held: held.add())]

        def element(item: Message) -> Any:
            return _first(getattr(reach(item), name))

        yield from field_cases(entry, element, f"{label}[].", seen)
    elif entry is not None:
        yield label, [untouched, on_field(lambda held: held.SetInParent())]

        def inner(item: Message) -> Any:
            return _present(getattr(reach(item), name))

        yield from field_cases(entry, inner, f"{label}.", seen)
    elif field.is_repeated:
        yield label, [untouched, *(on_field(_append(v)) for v in _samples(field))]
    else:
        # Setting a field with presence to its default is a change; otherwise it is not.
        values = _samples(field) if field.has_presence else _samples(field)[1:]
        yield label, [untouched, *(assign(v) for v in values)]


@pytest.mark.parametrize("message_class", [pb.MemoryItem, Sample], ids=["MemoryItem", "Sample"])
def test_every_field_a_message_reaches_changes_the_digest(message_class: Any) -> None:
    cases = list(field_cases(message_class.DESCRIPTOR, lambda item: item))
    for label, changes in cases:
        digests = []
        for change in changes:
            item = message_class()
            change(item)
            digests.append(digest(item))
        assert len(set(digests)) == len(digests), f"{label} does not change the digest"
    if message_class is pb.MemoryItem:  # the walk goes all the way down
        labels = {label for label, _ in cases}
        assert {
            "metadata",
            "entity.relations[].invalid_at.nanos",
            "history[].replaced_at.seconds",
            "relation.valid_from.seconds",
            "episode.steps[].observation",
        } <= labels


def test_a_client_on_an_older_contract_verifies_items_that_use_only_fields_it_knows() -> None:
    older = older_memory_item(
        {"MemoryItem": {"entity", "history"}, "Relation": {"valid_from", "invalid_at"}}
    )

    def as_older(item: pb.MemoryItem) -> Message:
        return older.FromString(item.SerializeToString())  # type: ignore[no-any-return]

    plain = pb.MemoryItem(id="r", tier=pb.TIER_ENTITY, kind=pb.KIND_RELATION)
    plain.relation.MergeFrom(pb.Relation(subject="Ana", predicate="lives_in", object="Lyon"))
    plain.created_at.FromSeconds(1_705_309_200)
    for item in [plain, golden_items()[1]]:
        assert export_stream.canonical_item(as_older(item)) == export_stream.canonical_item(item)
    # An item that sets a field the client does not know fails its check: the client
    # would drop the field, so it cannot vouch for the item.
    newer = [pb.MemoryItem(), pb.MemoryItem(), pb.MemoryItem()]
    newer[0].entity.name = "Ana"
    newer[1].history.add(content="Ana lived in Paris")
    newer[2].relation.valid_from.FromSeconds(1)
    for extra in newer:
        item = pb.MemoryItem()
        item.CopyFrom(plain)
        item.MergeFrom(extra)
        assert export_stream.canonical_item(as_older(item)) != export_stream.canonical_item(item)
