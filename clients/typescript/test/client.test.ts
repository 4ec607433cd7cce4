// The client against a real spine serve (test/server.ts): client tools
// answered by TypeScript functions, the round trips counted, errors both
// ways, files, sessions.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, SpineError, type Tools } from "../src/index.js";
import { runIdPattern, startSpine, type Spine } from "./server.js";

let spine: Spine;

before(async () => {
  spine = await startSpine();
});

after(async () => {
  await spine?.stop();
});

/** A Client whose requests are recorded as "METHOD path". */
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

const weather: Tools = {
  get_weather: {
    description: "The weather in a city now.",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    handler: ({ city }) => ({ city, temp: city === "Paris" ? 18 : 25, sky: "clear" }),
  },
};

describe("client tools", () => {
  test("get_weather(\"Paris\") is answered by a TypeScript function", async () => {
    const seen: unknown[] = [];
    const tools: Tools = {
      get_weather: {
        ...weather.get_weather,
        handler: (args, call) => {
          seen.push({ args, name: call.name, id: call.id, runId: call.runId });
          return weather.get_weather.handler(args, call);
        },
      },
    };
    const { client, requests } = counted();
    const r = await client.run('print("asking")\nw = get_weather("Paris")\nprint(w["sky"])\nw["temp"]', { tools });
    assert.equal(r.value, 18);
    assert.equal(r.stdout, "asking\nclear\n");
    assert.equal(r.rounds, 1);
    assert.equal(r.toolCalls, 1);
    assert.deepEqual(r.calls.map((c) => [c.tool, c.failed]), [["get_weather", false]]);
    assert.match(r.runId ?? "", runIdPattern);
    assert.deepEqual(seen, [{ args: { city: "Paris" }, name: "get_weather", id: "call_1", runId: r.runId }]);
    assert.deepEqual(requests, ["POST /v1/run", `POST /v1/runs/${r.runId}/tool_results`]);
  });

  test("16 reads in a loop from a read-only tool are one round trip", async () => {
    const asked: string[] = [];
    const price = (readOnly: boolean): Tools => ({
      "shop.price": {
        description: "The price of an item.",
        inputSchema: { type: "object", properties: { item: { type: "string" } }, required: ["item"] },
        outputSchema: { type: "integer" },
        readOnly,
        handler: async ({ item }) => {
          asked.push(String(item));
          return Number(String(item).slice("item".length)) + 1;
        },
      },
    });
    const source = "total = 0\nfor i in range(16):\n    total += shop.price(f\"item{i}\")\ntotal";
    const { client, requests } = counted();
    const r = await client.run(source, { tools: price(true) });
    assert.equal(r.value, 136); // 1 + 2 + ... + 16
    assert.equal(r.rounds, 1);
    assert.equal(requests.filter((q) => q.endsWith("/tool_results")).length, 1);
    assert.deepEqual(asked, Array.from({ length: 16 }, (_, i) => `item${i}`));
    assert.equal(r.calls.filter((c) => c.early).length, 16);

    // The same tool without readOnly: one round trip for each read.
    asked.length = 0;
    requests.length = 0;
    const slow = await client.run(source, { tools: price(false) });
    assert.equal(slow.value, 136);
    assert.equal(slow.rounds, 16);
    assert.equal(requests.filter((q) => q.endsWith("/tool_results")).length, 16);
  });

  test("asyncio.gather over a read-only tool is one pause, its calls answered at once", async () => {
    const events: string[] = [];
    const tools: Tools = {
      stock: {
        inputSchema: { type: "object", properties: { sku: { type: "integer" } }, required: ["sku"] },
        readOnly: true,
        handler: async ({ sku }) => {
          events.push(`start ${sku}`);
          await new Promise((resolve) => setImmediate(resolve));
          events.push(`end ${sku}`);
          return Number(sku) * 10;
        },
      },
    };
    const r = await new Client({ baseUrl: spine.url }).run(
      "import asyncio\nasync def main():\n    return await asyncio.gather(*(asyncio.to_thread(stock, sku=i) for i in range(3)))\nasyncio.run(main())",
      { tools },
    );
    assert.deepEqual(r.value, [0, 10, 20]);
    assert.equal(r.rounds, 1);
    // Every handler of the pause started before any ended: they ran together.
    assert.deepEqual(events, ["start 0", "start 1", "start 2", "end 0", "end 1", "end 2"]);
  });

  test("a handler that throws raises in the program", async () => {
    class LookupError extends Error {
      override name = "LookupError";
    }
    const tools: Tools = {
      get_weather: {
        ...weather.get_weather,
        handler: ({ city }) => {
          if (city === "Atlantis") throw new LookupError(`no such city: ${city}`);
          if (city === "Nowhere") throw new Error("the service is down");
          return { temp: 20 };
        },
      },
    };
    const client = new Client({ baseUrl: spine.url });
    const caught = await client.run(
      'out = []\nfor c in ("Atlantis", "Nowhere", "Rome"):\n' +
        "    try:\n        out.append(get_weather(c)['temp'])\n" +
        "    except RuntimeError as e:\n        out.append(str(e))\nout",
      { tools },
    );
    assert.deepEqual(caught.value, ["LookupError: no such city: Atlantis", "the service is down", 20]);
    assert.deepEqual(caught.calls.map((c) => c.failed), [true, true, false]);

    const err = await client.run('print("before")\nget_weather("Atlantis")', { tools }).then(
      () => assert.fail("the run succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof SpineError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.kind, "python");
    assert.equal(err.error.type, "RuntimeError");
    assert.equal(err.error.message, "LookupError: no such city: Atlantis");
    assert.equal(err.error.line, 2);
    assert.match(err.error.traceback ?? "", /get_weather\("Atlantis"\)/);
    assert.equal(err.message, "RuntimeError: LookupError: no such city: Atlantis");
    assert.equal(err.result?.stdout, "before\n");
    assert.equal(err.result?.rounds, 1);
  });

  test("values: undefined is None, a value without JSON is the call's error, async handlers", async () => {
    const tools: Tools = {
      nothing: { handler: () => undefined },
      big: { handler: () => 10n },
      later: {
        inputSchema: { type: "object", properties: { x: { type: "integer" } }, required: ["x"] },
        handler: async ({ x }) => {
          await new Promise((resolve) => setImmediate(resolve));
          return { twice: Number(x) * 2, list: [1, "two", null] };
        },
      },
    };
    const r = await new Client({ baseUrl: spine.url }).run(
      "a = nothing()\ntry:\n    big()\n    b = None\nexcept RuntimeError as e:\n    b = str(e)\n[a, b, later(21)]",
      { tools },
    );
    const [a, b, c] = r.value as [unknown, string, unknown];
    assert.equal(a, null);
    assert.match(b, /^TypeError: big's value is not JSON: .*BigInt/);
    assert.deepEqual(c, { twice: 42, list: [1, "two", null] });
  });

  test("inputs, files in and out, and the server's own tools beside the client's", async () => {
    const r = await new Client({ baseUrl: spine.url }).run(
      'rows = open("data/in.csv").read().splitlines()\n' +
        'open("out.txt", "w").write(f"{len(rows)} rows, {get_weather(inputs[\'city\'])[\'temp\']} degrees")\n' +
        'lookup(key="book") * inputs["n"]',
      {
        tools: weather,
        inputs: { city: "Paris", n: 2 },
        files: [
          { name: "data/in.csv", data: "a,b\n1,2\n" },
          { name: "bytes.bin", data: new Uint8Array([0, 255, 7]) },
        ],
      },
    );
    assert.equal(r.value, 42);
    const out = r.files.find((f) => f.name === "out.txt");
    assert.ok(out, JSON.stringify(r.files.map((f) => f.name)));
    assert.equal(new TextDecoder().decode(out.data), "2 rows, 18 degrees");
    assert.deepEqual(r.calls.map((c) => c.tool), ["get_weather", "lookup"]);
  });

  test("a run without client tools is one request", async () => {
    const { client, requests } = counted();
    const r = await client.run('lookup(key="pen") + inputs["x"]', { inputs: { x: 1 } });
    assert.equal(r.value, 3);
    assert.equal(r.rounds, 0);
    assert.equal(r.runId, undefined);
    assert.deepEqual(requests, ["POST /v1/run"]);
  });

  test("the server's refusals are SpineErrors carrying its error object", async () => {
    const client = new Client({ baseUrl: spine.url });
    const clash = await client.run("1", { tools: { lookup: { handler: () => 1 } } }).catch((e: unknown) => e);
    assert.ok(clash instanceof SpineError, String(clash));
    assert.equal(clash.status, 400);
    assert.equal(clash.kind, "bad_request");
    assert.match(clash.error.message, /lookup/);

    const timeout = await client.run("while True:\n    pass", { timeoutMs: 50 }).catch((e: unknown) => e);
    assert.ok(timeout instanceof SpineError, String(timeout));
    assert.equal(timeout.status, 408);
    assert.equal(timeout.kind, "timeout");

    const unknownRun = await client.request("POST", "/v1/runs/run_0/tool_results", { json: { results: [{ id: "call_1", value: 1 }] } }).catch((e: unknown) => e);
    assert.ok(unknownRun instanceof SpineError, String(unknownRun));
    assert.equal(unknownRun.status, 404);
    assert.equal(unknownRun.kind, "not_found");
  });
});

describe("sessions", () => {
  test("create, run with tools, snapshot, restore, delete", async () => {
    const client = new Client({ baseUrl: spine.url });
    const s = await client.createSession();
    assert.match(s.id, /^[0-9a-f]{32}$/);
    const first = await s.run('w = get_weather("Paris")\nseen = [w["temp"]]', { tools: weather });
    assert.equal(first.value, null);
    assert.equal(first.rounds, 1);
    const second = await s.run('seen.append(get_weather("Lima")["temp"])\nseen', { tools: weather });
    assert.deepEqual(second.value, [18, 25]);

    const snap = await s.snapshot();
    assert.ok(snap.length > 1000, `a snapshot of ${snap.length} bytes`);
    const copy = await client.restoreSession(snap);
    assert.notEqual(copy.id, s.id);
    assert.deepEqual((await copy.run("seen + [len(seen)]")).value, [18, 25, 2]);

    await s.delete();
    const gone = await s.run("seen").catch((e: unknown) => e);
    assert.ok(gone instanceof SpineError, String(gone));
    assert.equal(gone.status, 404);
    assert.equal(gone.kind, "not_found");
    assert.deepEqual((await client.session(copy.id).run("seen")).value, [18, 25]);
    await copy.delete();

    const named = await client.restoreSession(snap, { id: "ts-client_1" });
    assert.equal(named.id, "ts-client_1");
    assert.deepEqual((await named.run("seen")).value, [18, 25]);
    await named.delete();

    const bad = await client.restoreSession(new TextEncoder().encode("not a snapshot")).catch((e: unknown) => e);
    assert.ok(bad instanceof SpineError, String(bad));
    assert.equal(bad.kind, "bad_snapshot");
  });
});
