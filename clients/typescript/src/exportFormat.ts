// The export stream's checksum, item-jcs-v1 (docs/reference/export-format.md): sha256 over
// each item's RFC 8785 canonical JSON, then "\n". The JSON value is derived from the
// message's descriptor (the generated schema), as the server's canonical_value does: every
// set field by its .proto name, recursively; a field without presence at its default is
// left out, so a field added to memory.proto changes no digest of an item leaving it unset.
import { createHash } from "node:crypto";
import { ScalarType, type DescEnum, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { MemoryItemSchema, type MemoryItem } from "./gen/memoryd/v1/memory_pb.js";

export const CHECKSUM_FORMAT = "item-jcs-v1";
export const FORMAT_VERSION = "1";

type Json = boolean | number | string | Json[] | { [key: string]: Json };

// RFC 8785 for the values built here (strings, booleans, 32-bit integers, arrays,
// objects): JSON.stringify's escaping, keys sorted by UTF-16 code units (sort()'s order).
function jcs(v: Json): string {
  if (typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(jcs).join(",")}]`;
  const members = Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${jcs(v[k])}`);
  return `{${members.join(",")}}`;
}

// A float (size 4) or double (8) as its IEEE-754 bits in big-endian hex: exact, where
// decimal text is not. One form for either zero and for every NaN, as JSON keeps neither.
function bits(x: number, size: 4 | 8): string {
  if (Number.isNaN(x)) return size === 4 ? "7fc00000" : "7ff8000000000000";
  const view = new DataView(new ArrayBuffer(size));
  if (size === 4) view.setFloat32(0, x === 0 ? 0 : x);
  else view.setFloat64(0, x === 0 ? 0 : x);
  return Buffer.from(view.buffer).toString("hex");
}

const INT64S = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

function scalar(type: ScalarType, v: unknown): Json {
  switch (type) {
    case ScalarType.FLOAT:
      return bits(v as number, 4);
    case ScalarType.DOUBLE:
      return bits(v as number, 8);
    case ScalarType.BYTES:
      return Buffer.from(v as Uint8Array).toString("base64");
    case ScalarType.STRING:
    case ScalarType.BOOL:
      return v as string | boolean;
    default:
      // 64-bit integers as decimal strings (as proto JSON writes them); 32-bit as numbers.
      return INT64S.has(type) ? String(v) : (v as number);
  }
}

// An enum value by its .proto name; a number the descriptor does not name, as that number.
function enumValue(desc: DescEnum, v: number): Json {
  return desc.value[v]?.name ?? v;
}

// One value of a kind: a singular field's, a list element's or a map value's.
function single(kind: "scalar" | "enum" | "message", field: DescField, v: unknown): Json {
  if (kind === "message") return canonicalValue(v as ReflectMessage);
  if (kind === "enum") return enumValue(field.enum!, v as number);
  return scalar(field.scalar!, v);
}

function isSet(m: ReflectMessage, field: DescField): boolean {
  // reflect's isSet counts -0 as set in a float without presence; the form folds it into 0.
  if (field.fieldKind === "scalar" && field.presence === FeatureSet_FieldPresence.IMPLICIT) {
    if (field.scalar === ScalarType.FLOAT || field.scalar === ScalarType.DOUBLE) return m.get(field) !== 0;
  }
  return m.isSet(field);
}

/** The JSON value item-jcs-v1 covers for any message, from its descriptor. */
export function canonicalValue(m: ReflectMessage): { [key: string]: Json } {
  const value: { [key: string]: Json } = {};
  for (const field of m.fields) {
    if (!isSet(m, field)) continue;
    switch (field.fieldKind) {
      case "map": {
        const entries: { [key: string]: Json } = {};
        // Keys: strings as they are, integers as decimal strings, bools as "true"/"false".
        for (const [k, v] of m.get(field)) entries[String(k)] = single(field.mapKind, field, v);
        value[field.name] = entries;
        break;
      }
      case "list":
        value[field.name] = Array.from(m.get(field), (v) => single(field.listKind, field, v));
        break;
      default:
        value[field.name] = single(field.fieldKind, field, m.get(field));
    }
  }
  return value;
}

/** A message's item-jcs-v1 form: canonical JSON of `canonicalValue`, then a newline. */
export function canonicalForm<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return `${jcs(canonicalValue(reflect(schema, message)))}\n`;
}

/** One item's item-jcs-v1 form. */
export function canonicalItem(item: MemoryItem): string {
  return canonicalForm(MemoryItemSchema, item);
}

/** The running checksum over items in stream order. */
export class Checksum {
  private sha = createHash("sha256");
  count = 0;
  add(item: MemoryItem): void {
    this.sha.update(canonicalItem(item), "utf8");
    this.count += 1;
  }
  hexdigest(): string {
    return this.sha.copy().digest("hex");
  }
}

export function exportChecksum(items: Iterable<MemoryItem>): string {
  const sum = new Checksum();
  for (const item of items) sum.add(item);
  return sum.hexdigest();
}
