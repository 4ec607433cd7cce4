// Durable pauses (docs/scaling.md, "Paused runs") against two real spine
// serve replicas, a and b, sharing a session store (file://, a temporary
// folder): a run paused on a is continued by b, under a new run id that the
// client follows, and a continuation refused 503 closed by a draining
// replica is sent again. The client's requests go to a until they are moved
// to b, as a load balancer would once a's run is in the store or a drains.

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
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

/** Resolves once the store in dir holds the key of a run not in known (a take-over writes its claim, then the run's pause under its new id), with it. */
async function newRunKey(dir: string, known: Set<string>): Promise<string> {
  const runs = join(dir, "runs");
  for (;;) {
    const fresh = (existsSync(runs) ? readdirSync(runs) : []).filter((k) => !known.has(k));
    if (fresh.length > 0) return fresh[0];
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("a continuation follows the run to the id another replica took it over as", async () => {
  // b takes the run over and stops (drained, --grace 0) before its next pause: it answers 503
  // closed, and the client sends the results again, to a, which held the run and answers 409
  // naming the id b continued it as; the client sends them there, and a takes the run over from
  // b's stored pause. Past the pause lookup is allowed on b, where the program then spins, and
  // asks for approval on a (--ask lookup), refused here.
  const dir = mkdtempSync(join(tmpdir(), "spine-ts-store-"));
  const store = ["--session-store", "file://" + dir];
  const spines: Spine[] = [];
  try {
    spines.push(await startSpine(...store, "--replica", "a", "--ask", "lookup"));
    spines.push(await startSpine(...store, "--replica", "b", "--grace", "0"));
    const [a, b] = spines;
    const sent: [string, string, number][] = [];
    let on = a;
    const client = new Client({
      baseUrl: a.url,
      fetch: async (input, init) => {
        const replica = on === a ? "a" : "b";
        const path = new URL(String(input)).pathname;
        const resp = await fetch(on.url + path, init);
        sent.push([replica, path, resp.status]);
        if (resp.status === 503) on = a; // b is gone: the load balancer's next pick
        return resp;
      },
    });
    let drained: Promise<void> = Promise.resolve();
    const tools = ask(() => {
      on = b;
      drained = (async () => {
        const known = new Set([await newRunKey(dir, new Set())]); // a's pause
        await newRunKey(dir, known); // b's claim, then its pause again under its new id
        await b.drain();
      })();
    });
    const approvals: string[] = [];
    const source = "n = ask(1)\ntry:\n    lookup('book')\n    while True:\n        pass\nexcept PermissionError:\n    pass\nn";
    const r = await client.run(source, { tools, approve: (ap) => (approvals.push(ap.tool), false) });
    await drained;
    assert.equal(r.value, 10);
    assert.equal(r.rounds, 2);
    assert.deepEqual(approvals, ["lookup"]);
    assert.deepEqual(sent.map(([replica, , status]) => [replica, status]), [["a", 200], ["b", 503], ["a", 409], ["a", 200], ["a", 200]]);
    const paths = sent.map(([, path]) => path);
    const [oldId, movedId, lastId] = paths.slice(2).map((p) => p.split("/")[3]);
    assert.equal(paths[1], paths[2]);
    assert.ok(oldId.startsWith("run_a."), oldId);
    assert.ok(movedId.startsWith("run_b."), movedId);
    assert.ok(lastId.startsWith("run_a."), lastId);
    assert.equal(paths[3], `/v1/runs/${movedId}/tool_results`);
    assert.ok(paths[4].endsWith("/approvals"), paths[4]);
    assert.equal(r.runId, lastId);
  } finally {
    await Promise.all(spines.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
});
