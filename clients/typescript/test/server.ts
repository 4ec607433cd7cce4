// A real spine serve for the tests: built from this repository with go
// build into a temporary folder, once for the test file (or $SPINE_BIN),
// started on a free loopback port with the demo tools and none of this
// process's SPINE_* variables, stopped by stop().

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * A run id (service/runid.go): "run_", the replica's name and a dot when the
 * server has one, the process's incarnation (8 hex digits), a dot, 32 hex.
 */
export const runIdPattern = /^run_(?:[A-Za-z0-9-]{1,63}\.)?[0-9a-f]{8}\.[0-9a-f]{32}$/;

export interface Spine {
  /** The server's address: http://127.0.0.1:PORT. */
  url: string;
  /** Everything the server wrote to standard error so far. */
  log(): string;
  /**
   * Sends SIGTERM and resolves once the server drains: it says it is
   * shutting down after Server.Drain, which refuses new requests 503 closed
   * and hands the paused runs a session store keeps over. Its listener
   * stays open for --drain-delay; stop, a second signal, ends it at once.
   */
  drain(): Promise<void>;
  /** Stops the server (SIGINT: it stops its runs, paused ones included) and waits for it. */
  stop(): Promise<void>;
}

/** The repository's root: the folder above this one that holds go.work. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "go.work"))) {
    const up = dirname(dir);
    if (up === dir) {
      throw new Error(`no go.work above ${fileURLToPath(import.meta.url)}: set SPINE_BIN to a spine binary`);
    }
    dir = up;
  }
  return dir;
}

let built: string | undefined;

/**
 * The spine binary: $SPINE_BIN, or built from this repository into a new
 * temporary folder once for this process, removed when it exits.
 */
function spineBinary(): string {
  if (process.env.SPINE_BIN) {
    return process.env.SPINE_BIN;
  }
  if (built === undefined) {
    const dir = mkdtempSync(join(tmpdir(), "spine-ts-client-"));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    const bin = join(dir, "spine");
    const go = process.env.GO ?? "go";
    const r = spawnSync(go, ["build", "-o", bin, "./cmd/spine"], { cwd: repoRoot(), stdio: ["ignore", "inherit", "inherit"] });
    if (r.status !== 0) {
      throw new Error(`go build ./cmd/spine failed (${r.error?.message ?? "exit " + r.status})`);
    }
    built = bin;
  }
  return built;
}

/**
 * This process's environment without its SPINE_* variables, which would
 * change the server (SPINE_REPLICA, SPINE_CONFIG, SPINE_TOKEN, ...).
 */
function serverEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("SPINE_")));
}

/** Starts spine serve --demo-tools on a free port, with extra flags. */
export async function startSpine(...flags: string[]): Promise<Spine> {
  const child = spawn(spineBinary(), ["serve", "--listen", "127.0.0.1:0", "--demo-tools", ...flags], {
    stdio: ["ignore", "ignore", "pipe"],
    env: serverEnv(),
  });
  const killAtExit = () => child.kill("SIGKILL");
  process.on("exit", killAtExit);
  let stderr = "";
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      stderr += chunk;
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) resolve(m[1]);
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`spine serve exited (${code}) before listening:\n${stderr}`)));
  });
  return {
    url,
    log: () => stderr,
    drain: async () => {
      const drained = new Promise<void>((resolve, reject) => {
        const seen = () => {
          if (stderr.includes("shutting down")) {
            child.stderr!.off("data", seen);
            resolve();
          }
        };
        child.stderr!.on("data", seen);
        child.once("exit", (code) => reject(new Error(`spine serve exited (${code}) before it drained:\n${stderr}`)));
      });
      child.kill("SIGTERM");
      await drained;
    },
    stop: async () => {
      stopChild(child);
      await exited;
      process.off("exit", killAtExit);
    },
  };
}

function stopChild(child: ChildProcess): void {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGINT");
  }
}
