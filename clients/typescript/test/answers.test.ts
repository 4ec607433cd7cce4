// What the client does with answers a spine serve does not give — a
// proxy's page, an empty body, a pause naming a tool the client lacks — and
// with an aborted signal: a fetch of the test's own answers each request.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, SpineError } from "../src/index.js";

/** A Client whose fetch answers from answers in order, recording each request's body. */
function scripted(...answers: Response[]): { client: Client; sent: unknown[] } {
  const sent: unknown[] = [];
  const client = new Client({
    baseUrl: "http://spine.test",
    fetch: async (_input, init) => {
      init?.signal?.throwIfAborted();
      sent.push(typeof init?.body === "string" ? JSON.parse(init.body) : init?.body);
      const a = answers.shift();
      assert.ok(a, "a request past the script");
      return a;
    },
  });
  return { client, sent };
}

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

test("a proxy's page is a SpineError of kind http with its status", async () => {
  const { client } = scripted(new Response("<html>bad gateway</html>", { status: 502, headers: { "Retry-After": "3" } }));
  const e = await client.run("1").catch((err: unknown) => err);
  assert.ok(e instanceof SpineError, String(e));
  assert.equal(e.status, 502);
  assert.equal(e.kind, "http");
  assert.equal(e.retryAfter, 3);
  assert.match(e.message, /bad gateway/);
});

test("an empty or non-object answer to a run is a SpineError of kind protocol", async () => {
  for (const body of ["null", "[1]", "7"]) {
    const { client } = scripted(new Response(body, { status: 200 }));
    const e = await client.run("1").catch((err: unknown) => err);
    assert.ok(e instanceof SpineError, String(e));
    assert.equal(e.kind, "protocol");
  }
});

test("a pending call of a tool the client lacks is answered with an error", async () => {
  const pause = { value: null, stdout: "", stderr: "", tool_calls: 0, error: null, timing: { total_ms: 1, run_ms: 0 } };
  const { client, sent } = scripted(
    json(200, { ...pause, status: "tool_calls", run_id: "run_1", pending: [{ id: "call_1", name: "missing", arguments: {} }, { id: "call_2", name: "ok", arguments: { n: 1 } }] }),
    json(200, { ...pause, value: 2, status: "done", run_id: "run_1" }),
  );
  const r = await client.run("x", { tools: { ok: { handler: ({ n }) => Number(n) + 1 } } });
  assert.equal(r.value, 2);
  assert.deepEqual(sent[1], {
    results: [
      { id: "call_1", error: { message: 'this client has no tool "missing"', type: "LookupError" } },
      { id: "call_2", value: 2 },
    ],
  });
});

test("an aborted signal stops the loop at its next request", async () => {
  const pause = { value: null, stdout: "", stderr: "", tool_calls: 0, error: null, timing: { total_ms: 1, run_ms: 0 } };
  const { client, sent } = scripted(json(200, { ...pause, status: "tool_calls", run_id: "run_1", pending: [{ id: "call_1", name: "stop", arguments: {} }] }));
  const ctl = new AbortController();
  const e = await client
    .run("stop()", { signal: ctl.signal, tools: { stop: { handler: () => ctl.abort(new Error("the caller gave up")) } } })
    .catch((err: unknown) => err);
  assert.equal((e as Error).message, "the caller gave up");
  assert.equal(sent.length, 1);
});
