// Node side of the framing-overhead benchmark, over the TypeScript client (built to
// clients/typescript/dist): N Health checks, then N working-tier Adds, one at a time.
import { MemoryClient } from "../../clients/typescript/dist/src/index.js";

const [target = "127.0.0.1:50051", count = "500", user = "bench-node"] = process.argv.slice(2);
const n = Number(count);
const client = new MemoryClient(target);
const scope = { userId: user, agentId: "a", taskId: "t" };
const ops = {
  health: () => client.health(),
  add_working: (i) => client.add({ ...scope, tier: "working", key: `k${i % 50}`, content: "v" }),
};
for (const [name, call] of Object.entries(ops)) {
  for (let i = 0; i < 20; i++) await call(i); // warm-up
  const ms = [];
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint();
    await call(i);
    ms.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  console.log(JSON.stringify({ client: "node", op: name, ms }));
}
client.close();
