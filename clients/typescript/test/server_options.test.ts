// The client against servers started with other flags: one slot, whose
// tool results wait for it (429 overloaded, sent again after Retry-After),
// and a token.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Client, SpineError } from "../src/index.js";
import { startSpine } from "./server.js";

/** Waits until the server's /healthz says slots_busy is busy (a poll: the order, not the time, is tested). */
async function slotsBusy(url: string, busy: number): Promise<void> {
  for (;;) {
    const h = (await (await fetch(url + "/healthz")).json()) as { slots_busy: number };
    if (h.slots_busy === busy) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("tool results sent while every slot is busy are sent again after Retry-After", async () => {
  const spine = await startSpine("--slots", "1", "--stream-slots", "1");
  try {
    // A stream holds the one slot from its first byte until its body ends.
    let endStream!: () => void;
    let stream: Promise<Response> | undefined;
    const holdSlot = async () => {
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode("x = 1\n"));
          endStream = () => {
            c.enqueue(new TextEncoder().encode("x + 1\n"));
            c.close();
          };
        },
      });
      stream = fetch(spine.url + "/v1/run/stream", {
        method: "POST",
        headers: { "Content-Type": "text/x-python" },
        body,
        duplex: "half",
      } as RequestInit);
      await slotsBusy(spine.url, 1);
    };
    const statuses: number[] = [];
    const client = new Client({
      baseUrl: spine.url,
      fetch: async (input, init) => {
        const resp = await fetch(input, init);
        if (String(input).endsWith("/tool_results")) {
          statuses.push(resp.status);
          if (resp.status === 429) {
            endStream(); // the stream's run ends: the slot is free for the results sent again
            assert.equal(((await (await stream!).json()) as { value: unknown }).value, 2);
            await slotsBusy(spine.url, 0);
          }
        }
        return resp;
      },
    });
    const r = await client.run('get_weather("Oslo")["temp"] + 1', {
      tools: {
        get_weather: {
          inputSchema: { type: "object", properties: { city: { type: "string" } } },
          handler: async () => {
            await holdSlot(); // the run is paused, its slot given back: the stream takes it
            return { temp: 4 };
          },
        },
      },
    });
    assert.equal(r.value, 5);
    assert.deepEqual(statuses, [429, 200]);
  } finally {
    await spine.stop();
  }
});

test("a server with a token: the client sends it; without it, 401 unauthorized", async () => {
  const dir = mkdtempSync(join(tmpdir(), "spine-ts-token-"));
  const token = "a-test-token-of-some-length";
  writeFileSync(join(dir, "token"), token + "\n", { mode: 0o600 });
  const spine = await startSpine("--token-file", join(dir, "token"));
  try {
    const r = await new Client({ baseUrl: spine.url, token }).run("double(21)", {
      tools: { double: { inputSchema: { type: "object", properties: { n: { type: "integer" } } }, handler: ({ n }) => Number(n) * 2 } },
    });
    assert.equal(r.value, 42);
    const e = await new Client({ baseUrl: spine.url }).run("1").catch((err: unknown) => err);
    assert.ok(e instanceof SpineError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.kind, "unauthorized");
  } finally {
    await spine.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
