// The export stream's checksum, item-jcs-v1 (docs/reference/export-format.md): sha256 over
// each item's RFC 8785 canonical JSON of every field, then "\n".
import { createHash } from "node:crypto";
import { toJson } from "@bufbuild/protobuf";
import { MemoryItemSchema, type MemoryItem } from "./gen/memoryd/v1/memory_pb.js";

export const CHECKSUM_FORMAT = "item-jcs-v1";
export const FORMAT_VERSION = "1";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// RFC 8785 for the values used here (strings, booleans, null, int32s, arrays, objects):
// JSON.stringify's escaping, keys sorted by UTF-16 code units (sort()'s default order).
function jcs(v: Json): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(jcs).join(",")}]`;
  const members = Object.keys(v)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${jcs(v[k])}`);
  return `{${members.join(",")}}`;
}

function float32(x: number): string {
  if (Number.isNaN(x)) return "7fc00000";
  const view = new DataView(new ArrayBuffer(4));
  view.setFloat32(0, x === 0 ? 0 : x);
  return view.getUint32(0).toString(16).padStart(8, "0");
}

function timestamp(ts: { seconds: bigint; nanos: number } | undefined): Json {
  return ts === undefined ? null : { seconds: ts.seconds.toString(), nanos: ts.nanos };
}

function enumName(json: Record<string, unknown>, field: string, unset: string): string | number {
  const value = json[field];
  return typeof value === "string" || typeof value === "number" ? value : unset;
}

/** One item's item-jcs-v1 form: canonical JSON of every field, then a newline. */
export function canonicalItem(item: MemoryItem): string {
  const names = toJson(MemoryItemSchema, item, { alwaysEmitImplicit: true }) as Record<string, unknown>;
  const e = item.episode;
  const r = item.relation;
  const value: Json = {
    id: item.id,
    tier: enumName(names, "tier", "TIER_UNSPECIFIED"),
    kind: enumName(names, "kind", "KIND_UNSPECIFIED"),
    content: item.content,
    key: item.key,
    score: float32(item.score),
    metadata: { ...item.metadata },
    importance: float32(item.importance),
    created_at: timestamp(item.createdAt),
    updated_at: timestamp(item.updatedAt),
    expires_at: timestamp(item.expiresAt),
    source: enumName(names, "source", "SOURCE_UNSPECIFIED"),
    role: enumName(names, "role", "ROLE_UNSPECIFIED"),
    agent_id: item.agentId,
    session_id: item.sessionId,
    task_id: item.taskId,
    episode:
      e === undefined
        ? null
        : {
            task: e.task,
            steps: e.steps.map((s) => ({ action: s.action, observation: s.observation })),
            outcome: e.outcome,
            success: e.success,
          },
    relation: r === undefined ? null : { subject: r.subject, predicate: r.predicate, object: r.object },
    document_json: item.documentJson,
    archived: item.archived,
    deleted: item.deleted,
  };
  return `${jcs(value)}\n`;
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
