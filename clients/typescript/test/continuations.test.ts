// What the client does beside a run's own answers: Retry-After out of
// bounds, 503 closed and decisions on approvals sent again, giving up and
// resuming a paused run, continuations that reached the wrong replica,
// redirects, POST /v1/tool/call's file_data, and the tests' server's
// environment.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { type AddressInfo } from "node:net";
import { after, before, test } from "node:test";

import { Client, SpineError } from "../src/index.js";
import { retryWaitMs } from "../src/client.js";
import { runIdPattern, startSpine, type Spine } from "./server.js";

let spine: Spine;

before(async () => {
  // The server must not see it (test/server.ts): its run ids would name it.
  process.env.SPINE_REPLICA = "from-the-caller";
  try {
    spine = await startSpine("--replica", "t1");
  } finally {
    delete process.env.SPINE_REPLICA;
  }
});

after(async () => {
  await spine?.stop();
});

/** A Client of the test's server whose requests are recorded as "METHOD path". */
function counted(): { client: Client; requests: string[] } {
  const requests: string[] = [];
  const client = new Client({
    baseUrl: spine.url,
    fetch: (input, init) => {
      requests.push(`${init?.method ?? "GET"} ${new URL(String(input)).pathname}`);
      return fetch(input, init);
    },
  });
  return { client, requests };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });

const empty = { value: null, stdout: "", stderr: "", tool_calls: 0, error: null, timing: { total_ms: 1, run_ms: 0 } };

test("Retry-After is kept within 0 to 30 seconds", () => {
  assert.equal(retryWaitMs(undefined), 1000);
  assert.equal(retryWaitMs(NaN), 1000);
  assert.equal(retryWaitMs(-1), 0);
  assert.equal(retryWaitMs(2.5), 2500);
  assert.equal(retryWaitMs(1e9), 30_000); // setTimeout would fire at once past 2^31 ms
  assert.equal(retryWaitMs(Infinity), 30_000);
});

test("after 60 sendings refused as overloaded the error carries the run id and results", async () => {
  const inits: RequestInit[] = [];
  const pause = { ...empty, status: "tool_calls", run_id: "run_1", pending: [{ id: "call_1", name: "one", arguments: {} }] };
  const overloaded = { ...empty, error: { kind: "overloaded", message: "all 1 run slots are busy" } };
  const client = new Client({
    baseUrl: "http://spine.test",
    fetch: async (_input, init) => {
      inits.push(init ?? {});
      return inits.length === 1 ? json(200, pause) : json(429, overloaded, { "Retry-After": "-1" });
    },
  });
  const e = await client.run("one()", { tools: { one: { handler: () => 7 } } }).catch((err: unknown) => err);
  assert.ok(e instanceof SpineError, String(e));
  assert.equal(e.kind, "overloaded");
  assert.equal(inits.length, 1 + 1 + 60); // the run, the results, 60 sendings again
  assert.equal(e.runId, "run_1");
  assert.deepEqual(e.results, [{ id: "call_1", value: 7 }]);
  assert.ok(inits.every((i) => i.redirect === "manual"), "no request follows a redirect");
});

/** A Client whose fetch answers from answers in order, recording "METHOD path" and each body. */
function scripted(answers: Response[], retries?: number): { client: Client; sent: [string, unknown][] } {
  const sent: [string, unknown][] = [];
  const client = new Client({
    baseUrl: "http://spine.test",
    retries,
    fetch: async (input, init) => {
      sent.push([`${init?.method} ${new URL(String(input)).pathname}`, JSON.parse(String(init?.body))]);
      const a = answers.shift();
      assert.ok(a, "a request past the script");
      return a;
    },
  });
  return { client, sent };
}

const closed = (retryAfter?: string) =>
  json(503, { ...empty, error: { kind: "closed", message: "the server is draining (shutting down)" } }, retryAfter === undefined ? {} : { "Retry-After": retryAfter });
const overloaded = (retryAfter: string) =>
  json(429, { ...empty, error: { kind: "overloaded", message: "all 1 run slots are busy" } }, { "Retry-After": retryAfter });
const approval = {
  ...empty,
  status: "approval_required",
  run_id: "run_1",
  approvals: [{ id: "approval_1", tool: "files.delete", arguments: { path: "x" }, reason: "--ask *.delete" }],
};

test("503 closed and 429 are sent again, tool results and decisions alike, at each answer's run id", async () => {
  const pause = { ...empty, status: "tool_calls", run_id: "run_2", pending: [{ id: "call_1", name: "one", arguments: {} }] };
  const { client, sent } = scripted([
    json(200, approval),
    closed("0"),
    overloaded("-1"),
    json(200, pause), // the run's next pause, under another id (a replica took it over)
    closed("-5"),
    json(200, { ...empty, value: 4, status: "done", run_id: "run_2" }),
  ]);
  const r = await client.run("files.delete('x')\none()", {
    tools: { one: { handler: () => 1 } },
    approve: () => ({ allow: false, reason: "no" }),
  });
  assert.equal(r.value, 4);
  assert.equal(r.rounds, 2);
  assert.equal(r.runId, "run_2");
  const decided = { approvals: [{ id: "approval_1", allow: false, reason: "no" }] };
  const results = { results: [{ id: "call_1", value: 1 }] };
  assert.deepEqual(sent.slice(1), [
    ["POST /v1/runs/run_1/approvals", decided],
    ["POST /v1/runs/run_1/approvals", decided],
    ["POST /v1/runs/run_1/approvals", decided],
    ["POST /v1/runs/run_2/tool_results", results],
    ["POST /v1/runs/run_2/tool_results", results],
  ]);
});

test("after the retries a 503 closed carries the run id and decisions; another 503 is not sent again", async () => {
  const { client, sent } = scripted([json(200, approval), closed("0"), closed("0"), closed("0")], 2);
  const e = await client.run("files.delete('x')", { approve: () => true }).catch((err: unknown) => err);
  assert.ok(e instanceof SpineError, String(e));
  assert.deepEqual([e.status, e.kind, e.runId, e.decisions, e.results], [503, "closed", "run_1", [{ id: "approval_1", allow: true }], undefined]);
  assert.equal(sent.length, 4);
  const unavailable = json(503, { ...empty, error: { kind: "store_unavailable", message: "the store could not be read" } });
  const pause = { ...empty, status: "tool_calls", run_id: "run_1", pending: [{ id: "call_1", name: "one", arguments: {} }] };
  const other = scripted([json(200, pause), unavailable]);
  const e2 = await other.client.run("one()", { tools: { one: { handler: () => 1 } } }).catch((err: unknown) => err);
  assert.ok(e2 instanceof SpineError, String(e2));
  assert.deepEqual([e2.kind, e2.runId, e2.results], ["store_unavailable", "run_1", [{ id: "call_1", value: 1 }]]);
  assert.equal(other.sent.length, 2);
});

test("resume sends a paused run's results and drives it on", async () => {
  const client = new Client({ baseUrl: spine.url });
  const schema = { type: "object", properties: { n: { type: "integer" } } };
  const paused = await client.request("POST", "/v1/run", {
    json: { source: "double(21) + double(1)", tools: [{ name: "double", input_schema: schema }] },
  });
  const p = paused.body as { status: string; run_id: string; pending: { id: string }[] };
  assert.equal(p.status, "tool_calls");
  assert.match(p.run_id, runIdPattern);
  assert.ok(!p.run_id.includes("from-the-caller"), "the server saw the caller's SPINE_REPLICA");
  const r = await client.resume(p.run_id, [{ id: p.pending[0].id, value: 42 }], {
    tools: { double: { inputSchema: schema, handler: ({ n }) => Number(n) * 2 } },
  });
  assert.equal(r.value, 44);
  assert.equal(r.rounds, 2);
  assert.equal(r.runId, p.run_id);
});

test("421 run_elsewhere and 410 run_lost are thrown at once, not sent again", async () => {
  const { client, requests } = counted();
  const r = await client.run("ask()", { tools: { ask: { handler: () => 1 } } });
  const [replica, incarnation] = r.runId!.slice("run_".length).split(".");
  const other = incarnation.slice(0, 7) + (incarnation[7] === "0" ? "1" : "0"); // an earlier process's
  const results = [{ id: "call_1", value: 1 }];
  for (const [runId, status, kind] of [
    [`run_r9.${incarnation}.${"0".repeat(32)}`, 421, "run_elsewhere"],
    [`run_${replica}.${other}.${"0".repeat(32)}`, 410, "run_lost"],
  ] as const) {
    requests.length = 0;
    const e = await client.resume(runId, results).catch((err: unknown) => err);
    assert.ok(e instanceof SpineError, String(e));
    assert.deepEqual([e.status, e.kind, e.runId, e.results], [status, kind, runId, results]);
    assert.ok(e.message.includes(runId), e.message);
    assert.deepEqual(requests, [`POST /v1/runs/${runId}/tool_results`]);
  }
});

/** A local HTTP server answering every request with handle's status and headers, recording "METHOD path". */
async function listen(handle: (req: IncomingMessage) => [number, Record<string, string>]): Promise<{ url: string; seen: string[]; server: Server }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    req.resume();
    req.on("end", () => {
      const [status, headers] = handle(req);
      res.writeHead(status, headers).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

test("a redirect is not followed: the run's request never reaches another address", async () => {
  const elsewhere = await listen(() => [200, { "Content-Type": "application/json" }]);
  const proxy = await listen(() => [307, { Location: elsewhere.url + "/v1/run" }]);
  try {
    const e = await new Client({ baseUrl: proxy.url }).run("secret = 1", { inputs: { key: "k" } }).catch((err: unknown) => err);
    assert.ok(e instanceof SpineError, String(e));
    assert.equal(e.status, 307);
    assert.equal(e.kind, "http");
    assert.ok(e.message.includes(elsewhere.url + "/v1/run"), e.message);
    assert.deepEqual(proxy.seen, ["POST /v1/run"]);
    assert.deepEqual(elsewhere.seen, []);
  } finally {
    proxy.server.close();
    elsewhere.server.close();
  }
});

test("callTool with fileData: the images' data, and the files'", async () => {
  const client = new Client({ baseUrl: spine.url });
  // A PNG of 1 by 1 pixel.
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
  const args = { source: `import base64\nopen("dot.png", "wb").write(base64.b64decode("${png}"))\nopen("a.txt", "w").write("hi")` };

  const plain = await client.callTool(args);
  assert.equal(plain.is_error, false, plain.text);
  assert.equal(plain.images, undefined);
  assert.equal(plain.files, undefined);

  const images = await client.callTool(args, { fileData: "images" });
  assert.deepEqual(
    images.images?.map((im) => [im.source, im.name, im.mime_type, im.width, im.height, im.data]),
    [["file", "dot.png", "image/png", 1, 1, png]],
  );
  assert.equal(images.files, undefined);

  const all = await client.callTool(args, { fileData: "all" });
  assert.equal(all.images?.length, 1);
  assert.deepEqual(
    all.files?.map((f) => [f.name, f.data]).sort(),
    [["a.txt", btoa("hi")], ["dot.png", png]],
  );
});
