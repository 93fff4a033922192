// The TypeScript client against a live memoryd that this test run starts.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fromJson } from "@bufbuild/protobuf";
import {
  DEFAULT_RETRY,
  InvalidArgument,
  Kind,
  MemoryClient,
  QuotaExceeded,
  Tier,
  Unavailable,
  canonicalItem,
  exportChecksum,
  kind,
  pb,
  tier,
  type KindName,
  type MemoryItem,
  type TierName,
} from "../src/index.js";
import { ROOT, createKey, startMemoryd, type Memoryd } from "./server.js";

let memoryd: Memoryd;
let client: MemoryClient;
let n = 0;
const newUser = () => `ts-user-${process.pid}-${++n}`;

before(async () => {
  memoryd = await startMemoryd({ MEMORYD_LONG_TERM__MAX_MEMORIES: "5" });
  client = new MemoryClient(memoryd.target, { apiKey: "sk-ts-test" });
});

after(async () => {
  client?.close();
  await memoryd?.stop();
});

test("every tier and kind of the generated enums is accepted by its lower-case name", () => {
  const names = (e: object) => Object.keys(e).filter((k) => Number.isNaN(Number(k)) && k !== "UNSPECIFIED");
  for (const name of names(Tier)) assert.equal(tier(name.toLowerCase() as TierName), Tier[name as keyof typeof Tier]);
  for (const name of names(Kind)) assert.equal(kind(name.toLowerCase() as KindName), Kind[name as keyof typeof Kind]);
  // The names are types derived from the enums: a tier the proto does not have fails to compile.
  const structured: TierName = "structured";
  // @ts-expect-error "unspecified" is no tier a caller may name
  const none: TierName = "unspecified";
  assert.deepEqual([tier(structured), none], [Tier.STRUCTURED, "unspecified"]);
});

test("adds, retrieves, gets and deletes with tiers and kinds by name", async () => {
  const userId = newUser();
  assert.equal(await client.health(), "SERVING");
  const added = await client.add({
    userId,
    content: "Ana prefers window seats on long flights",
    tier: "long_term",
    kind: "preference",
    metadata: { src: "chat" },
  });
  assert.equal(added.tier, Tier.LONG_TERM);
  await client.add({ userId, content: "Ana owns a red bicycle", tier: Tier.LONG_TERM });

  const hits = await client.retrieve({ userId, query: "which seat does Ana like?", topK: 1 });
  assert.equal(hits.items.length, 1);
  assert.equal(hits.items[0].id, added.memoryId);
  assert.equal(hits.items[0].content, "Ana prefers window seats on long flights");
  assert.equal(hits.items[0].kind, Kind.PREFERENCE);
  assert.deepEqual(hits.items[0].metadata, { src: "chat" });
  assert.ok(hits.items[0].score > 0 && hits.items[0].score <= 1);

  const got = await client.get({ userId, tier: "long_term", ids: [added.memoryId, "nope"] });
  assert.deepEqual(got.items.map((i) => i.id), [added.memoryId]);
  assert.deepEqual(got.missing, ["nope"]);
  const deleted = await client.delete({ userId, tier: "LONG_TERM", ids: [added.memoryId] });
  assert.equal(deleted.deletedCount, 1n);

  await client.add({ userId, agentId: "planner", taskId: "trip", tier: "working", key: "step", content: "search" });
  const working = await client.get({ userId, agentId: "planner", taskId: "trip", tier: "TIER_WORKING", keys: ["step"] });
  assert.equal(working.items[0].content, "search");
  assert.throws(() => client.add({ userId, content: "x", tier: "longterm" }), /unknown tier "longterm"/);
});

test("renders the memory block, reports usage and prunes", async () => {
  const userId = newUser();
  await client.add({ userId, tier: "persona", key: "name", content: "Ana" });
  await client.add({ userId, content: "Ana is learning the cello" });
  const rendered = await client.renderContext({ userId, query: "cello" });
  assert.ok(rendered.context.startsWith("<memory>"));
  assert.ok(rendered.context.includes('<item tier="persona" kind="fact">name: Ana</item>'));
  const usage = await client.usage({ userId });
  const longTerm = usage.tiers.find((t) => t.tier === Tier.LONG_TERM);
  assert.equal(longTerm?.count, 1n);
  assert.equal(longTerm?.maxCount, 5n);
  const listed = await client.listUsers({ userIdPrefix: userId });
  assert.deepEqual(listed.users.map((u) => u.userId), [userId]);
  const page = await client.listMemories({ userId, tiers: ["persona"] });
  assert.deepEqual(page.items.map((i) => i.content), ["Ana"]);
  const explained = await client.retrieve({ userId, query: "cello", explain: true });
  assert.equal(explained.items[0].explain?.final, explained.items[0].score);
  const pruned = await client.prune({ userId, strategy: "all" });
  assert.ok(pruned.deletedCount >= 2n);
});

test("errors are typed and carry the server's details", async () => {
  const userId = newUser();
  await assert.rejects(client.retrieve({ userId, query: "q", topK: 500 }, { requestId: "req-ts" }), (err) => {
    assert.ok(err instanceof InvalidArgument);
    assert.equal(err.field, "top_k");
    assert.equal(err.reason, "INVALID_ARGUMENT");
    assert.equal(err.requestId, "req-ts");
    return true;
  });
  for (let i = 0; i < 5; i++) await client.add({ userId, content: `fact number ${i} about something else ${i * 7}` });
  await assert.rejects(client.add({ userId, content: "one too many" }), (err) => {
    assert.ok(err instanceof QuotaExceeded);
    assert.equal(err.max, 5);
    assert.equal(err.limitName, "long_term.max_memories");
    return true;
  });
});

test("ending a session without an extractor closes it and says extraction was skipped", async () => {
  const userId = newUser();
  await client.add({ userId, sessionId: "s", tier: "short_term", role: "user", content: "hello" });
  const ended = await client.endSession({ userId, sessionId: "s" });
  assert.equal(ended.extractionSkipped, true);
  assert.equal(ended.messagesProcessed, 1);
});

test("an unreachable server is retried by the channel policy, then Unavailable", async () => {
  const nowhere = new MemoryClient("127.0.0.1:1", { retry: { ...DEFAULT_RETRY, initialBackoffS: 0.01 } });
  try {
    await assert.rejects(nowhere.usage({ userId: "ana" }), Unavailable);
  } finally {
    nowhere.close();
  }
});

test("export checks its checksum and import restores it, verified by the server", async () => {
  const userId = newUser();
  for (const content of ["User likes jazz", "Naïve <b>é</b> \u2028 😀"]) {
    await client.add({ userId, content, metadata: { "😀": "\uff21", é: "1" }, importance: 0.8 });
  }
  await client.add({ userId, tier: "persona", key: "city", content: "Lyon" });
  const stream = client.export({ userId });
  const items: MemoryItem[] = [];
  for await (const item of stream) items.push(item);
  assert.equal(items.length, 3);
  assert.ok(stream.verified, "the client's checksum matches the server's");

  const copy = `${userId}-copy`;
  const restored = await client.import({ userId: copy, items });
  assert.equal(restored.importedCount, 3n);
  assert.equal(restored.checksumVerified, true);
  const again = await client.import({ userId: copy, items });
  assert.equal(again.skippedCount, 3n);
});

test("the checksum is the documented golden vector", () => {
  const doc = readFileSync(join(ROOT, "docs/reference/export-format.md"), "utf8");
  const lines = doc.split("\n").filter((l) => l.startsWith('{"item":'));
  const items = lines.map((l) => {
    const message = fromJson(pb.ExportResponseSchema, JSON.parse(l));
    assert.equal(message.payload.case, "item");
    return message.payload.value as MemoryItem;
  });
  // The forms the page states for them, in its ```text block, one line each.
  const forms = doc.split("```text\n")[1].split("```")[0].split("\n").filter((l) => l !== "");
  assert.equal(forms.length, 2);
  assert.deepEqual(items.map(canonicalItem), forms.map((f) => `${f}\n`));
  assert.equal(exportChecksum(items.slice(0, 1)), "1e050c6d7553703131186e61f7db0b0f632c92e0827f7942546e99a663bcbf51");
  assert.equal(exportChecksum(items), "e72ce64de91cf9cebe8ce2f9f7f4de4dc5fb594a5ef716eeea79f1f121da8a49");
});

test("addBatch stores each valid item and reports each invalid one alone", async () => {
  const userId = newUser();
  const batch = await client.addBatch([
    { userId, content: "Ana plays chess on Sundays" },
    { userId, content: "  " },
    { userId, content: "ana plays CHESS on sundays", kind: "fact" },
  ]);
  const [first, empty, repeat] = batch.results;
  assert.deepEqual(
    batch.results.map((r) => r.index),
    [0, 1, 2],
  );
  assert.equal(first.operation, pb.Operation.ADD);
  assert.equal(first.tier, Tier.LONG_TERM);
  assert.equal(empty.memoryId, "");
  assert.equal(empty.error?.code, 3); // INVALID_ARGUMENT
  assert.equal(empty.error?.field, "content");
  assert.equal(repeat.operation, pb.Operation.DEDUPLICATED);
  assert.equal(repeat.memoryId, first.memoryId);
  assert.deepEqual([batch.succeededCount, batch.failedCount], [2, 1]);
  await assert.rejects(client.addBatch([]), InvalidArgument);
});

test("a query past the caller's rate limit says rateLimited, not an empty memory", async () => {
  // A server that wants keys, and a key whose rate profile allows one query a minute.
  const dir = mkdtempSync(join(tmpdir(), "memoryd-ts-keys-"));
  const env = {
    MEMORYD_AUTH__KEYS_FILE: join(dir, "keys.jsonl"),
    MEMORYD_QUOTAS__PROFILES: JSON.stringify({ tight: { queries_per_minute: 1 } }),
  };
  const userId = newUser();
  const key = createKey(env, ["--tenant", "acme", "--role", "agent", "--user", userId, "--rate-profile", "tight"]);
  const limited = await startMemoryd(env);
  const tight = new MemoryClient(limited.target, { apiKey: key });
  try {
    await tight.add({ userId, content: "Ana prefers window seats" });
    const answered = await tight.retrieve({ userId, query: "seats" });
    assert.equal(answered.rateLimited, false);
    assert.equal(answered.items.length, 1);
    const refused = await tight.retrieve({ userId, query: "bikes" });
    assert.equal(refused.rateLimited, true);
    assert.equal(refused.items.length, 0);
    const rendered = await tight.renderContext({ userId, query: "bikes" });
    assert.equal(rendered.rateLimited, true);
    assert.equal(rendered.context, "");
  } finally {
    tight.close();
    await limited.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
