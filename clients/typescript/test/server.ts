// Starts a real memoryd (`python -m memoryd serve`) on a free port with a temporary data
// directory, for the tests; MEMORYD_PYTHON names the interpreter (default: the
// repository's .venv).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dirname, "../../../..");

export interface Memoryd {
  target: string;
  stop(): Promise<void>;
}

const python = () => process.env.MEMORYD_PYTHON ?? join(ROOT, ".venv/bin/python");

/** `memoryd keys create ...` with `env` (the server's settings); returns the key. */
export function createKey(env: Record<string, string>, args: string[]): string {
  const out = execFileSync(python(), ["-m", "memoryd", "keys", "create", ...args], {
    env: { ...process.env, PYTHONPATH: join(ROOT, "service"), ...env },
    stdio: ["ignore", "pipe", "ignore"],
  });
  return out.toString().trim().split("\n").at(-1)!;
}

export async function startMemoryd(env: Record<string, string> = {}): Promise<Memoryd> {
  const data = mkdtempSync(join(tmpdir(), "memoryd-ts-"));
  const child: ChildProcess = spawn(python(), ["-m", "memoryd", "serve", "--listen", "127.0.0.1:0"], {
    // Metrics on a free port too: the default one may be taken by another server.
    env: {
      ...process.env,
      PYTHONPATH: join(ROOT, "service"),
      MEMORYD_DATA_DIR: data,
      MEMORYD_METRICS__LISTEN: "127.0.0.1:0",
      ...env,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const port = await new Promise<number>((ok, fail) => {
    let log = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      log += chunk.toString();
      const found = /serving memoryd\.v1\.MemoryService on port (\d+)/.exec(log);
      if (found) ok(Number(found[1]));
    });
    child.on("exit", (code) => fail(new Error(`memoryd exited (${code}) before serving:\n${log}`)));
  });
  child.stderr!.resume();
  return {
    target: `127.0.0.1:${port}`,
    async stop() {
      const exited = new Promise((done) => child.on("exit", done));
      child.kill("SIGTERM");
      await exited;
      rmSync(data, { recursive: true, force: true });
    },
  };
}
