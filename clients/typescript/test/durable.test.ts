// Durable pauses (docs/scaling.md, "Paused runs") against two real spine
// serve replicas, a and b, sharing a session store (file://, a temporary
// folder): a run paused on a is continued by b, under a new run id that the
// client follows, and a continuation refused 503 closed by a draining
// replica is sent again. The client's requests go to a until they are moved
// to b, as a load balancer would once a's run is in the store or a drains.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Client, type Tools } from "../src/index.js";
import { runIdPattern, startSpine, type Spine } from "./server.js";

/**
 * A Client of a whose requests go to b once move is called (or, with
 * moveOn503, once a answered 503: a load balancer's next pick); sent
 * records [replica, path, status] of each.
 */
function routed(a: Spine, b: Spine, moveOn503 = false): { client: Client; sent: [string, string, number][]; move(): void } {
  const sent: [string, string, number][] = [];
  let moved = false;
  const client = new Client({
    baseUrl: a.url,
    fetch: async (input, init) => {
      const [replica, base] = moved ? ["b", b.url] : ["a", a.url];
      const path = new URL(String(input)).pathname;
      const resp = await fetch(base + path, init);
      sent.push([replica, path, resp.status]);
      moved ||= moveOn503 && resp.status === 503;
      return resp;
    },
  });
  return { client, sent, move: () => (moved = true) };
}

/** Two replicas, a with flags too, sharing a store in a new temporary folder; stopped and removed after f. */
async function replicas(aFlags: string[], f: (a: Spine, b: Spine) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "spine-ts-store-"));
  const store = ["--session-store", "file://" + dir];
  const spines: Spine[] = [];
  try {
    spines.push(await startSpine(...store, "--replica", "a", ...aFlags));
    spines.push(await startSpine(...store, "--replica", "b"));
    await f(spines[0], spines[1]);
  } finally {
    await Promise.all(spines.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}

const source = "ask(1) + ask(2)";

function ask(onCall: (n: number) => Promise<void> | void): Tools {
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
  return {
    ask: {
      inputSchema: schema,
      handler: async ({ n }) => {
        await onCall(Number(n));
        return 10 * Number(n);
      },
    },
  };
}

test("a run another replica took over is followed by its new id", async () => {
  await replicas([], async (a, b) => {
    const { client, sent, move } = routed(a, b);
    // The first call moves the client to b: the run's pause is in the store before its answer.
    const r = await client.run(source, { tools: ask(() => move()) });
    assert.equal(r.value, 30);
    assert.equal(r.rounds, 2);
    const [, first, second] = sent.map(([, path]) => path);
    const [oldId, newId] = [first.split("/")[3], second.split("/")[3]];
    assert.match(oldId, runIdPattern);
    assert.ok(oldId.startsWith("run_a."), oldId);
    assert.match(newId, runIdPattern);
    assert.ok(newId.startsWith("run_b."), newId);
    assert.equal(r.runId, newId);
    assert.deepEqual(sent, [
      ["a", "/v1/run", 200],
      ["b", `/v1/runs/${oldId}/tool_results`, 200],
      ["b", `/v1/runs/${newId}/tool_results`, 200],
    ]);
  });
});

test("a drain hands the run over: its 503 closed is sent again, and another replica continues the run", async () => {
  await replicas(["--drain-delay", "1h"], async (a, b) => {
    const { client, sent } = routed(a, b, true);
    // The first call drains a, which hands the run over to the store.
    const r = await client.run(source, { tools: ask((n) => (n === 1 ? a.drain() : undefined)) });
    assert.equal(r.value, 30);
    assert.equal(r.rounds, 2);
    assert.deepEqual(sent.map(([replica, , status]) => [replica, status]), [["a", 200], ["a", 503], ["b", 200], ["b", 200]]);
    const paths = sent.map(([, path]) => path);
    assert.equal(paths[1], paths[2]);
    assert.ok(paths[1].startsWith("/v1/runs/run_a."), paths[1]);
    assert.ok(paths[3].startsWith("/v1/runs/run_b."), paths[3]);
    assert.equal(r.runId, paths[3].split("/")[3]);
  });
});
