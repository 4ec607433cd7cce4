// The agent-loop examples against recorded exchanges: a local server
// answers each model request with testdata/API/N-response.json and checks
// what the example sent against N-request.json, whose tool results Spine
// computed by running the model's programs on a real spine serve, the
// agent's get_price answered in this process. UPDATE=1 rewrites the
// request files from what the examples send.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";

import { Client } from "../src/index.js";
import { agent as anthropic } from "../examples/anthropic.js";
import { agent as openai } from "../examples/openai.js";
import { agentTools } from "../examples/run_python.js";
import { startSpine, type Spine } from "./server.js";

const placeholder = "<run_python's description>";

let spine: Spine;

before(async () => {
  spine = await startSpine();
});

after(async () => {
  await spine?.stop();
});

/**
 * A server that replays testdata/api's exchanges in order; done() closes it
 * and says what went wrong.
 */
async function replay(api: string, toolsOf: (body: any) => { description: string }[]): Promise<{ url: string; descriptions: string[]; done: () => Promise<void> }> {
  const dir = new URL(`../../testdata/${api}/`, import.meta.url);
  const problems: string[] = [];
  const descriptions: string[] = [];
  let n = 0;
  const server: Server = createServer((req, res) => {
    let text = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (text += c));
    req.on("end", () => {
      n++;
      const body = JSON.parse(text);
      for (const t of toolsOf(body)) {
        descriptions.push(t.description);
        t.description = placeholder;
      }
      const sent = JSON.stringify(body, null, 2) + "\n";
      const want = new URL(`${n}-request.json`, dir);
      if (process.env.UPDATE) {
        writeFileSync(want, sent);
      } else if (sent !== readFileSync(want, "utf8")) {
        problems.push(`request ${n} differs from ${want.pathname}:\n${sent}`);
      }
      let answer: string;
      try {
        answer = readFileSync(new URL(`${n}-response.json`, dir), "utf8");
      } catch {
        problems.push(`request ${n}: no recorded response`);
        res.writeHead(500).end();
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    descriptions,
    done: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      assert.deepEqual(problems, []);
    },
  };
}

/** Checks each description the model was sent: the server's run_python and the agent's get_price. */
async function checkDescriptions(descriptions: string[], turns: number): Promise<void> {
  const def = await new Client({ baseUrl: spine.url }).toolDefinition();
  assert.equal(descriptions.length, turns);
  for (const d of descriptions) {
    assert.ok(d.startsWith(def.description), "run_python's description first");
    assert.ok(d.endsWith("\n- get_price(item: str) -> int: The price of an item, in euros."), d.slice(-200));
  }
}

test("the Anthropic messages loop: a failed program is an is_error tool_result, the model retries", async () => {
  const model = await replay("anthropic", (b) => b.tools);
  const log: string[] = [];
  const answer = await anthropic({
    prompt: "What do 3 books and 2 pens cost?",
    spine: new Client({ baseUrl: spine.url }),
    tools: agentTools,
    baseUrl: model.url,
    apiKey: "test-key",
    log: (line) => log.push(line),
  }).finally(model.done);
  assert.equal(answer, "3 books and 2 pens cost 67 euros.");
  assert.equal(log.length, 2);
  assert.match(log[0], /RuntimeError: LookupError: no such item: "books"/);
  await checkDescriptions(model.descriptions, 3);
});

test("the OpenAI responses loop: a function_call's program, its output back", async () => {
  const model = await replay("openai", (b) => b.tools);
  const log: string[] = [];
  const answer = await openai({
    prompt: "What do 3 books, 2 pens and a lamp cost?",
    spine: new Client({ baseUrl: spine.url }),
    tools: agentTools,
    baseUrl: model.url + "/v1",
    apiKey: "test-key",
    log: (line) => log.push(line),
  }).finally(model.done);
  assert.equal(answer, "3 books, 2 pens and a lamp cost 102 euros.");
  assert.deepEqual(log.map((l) => l.split("\n-> ")[1]), ['{"value":102,"stdout":"total: 102\\n"}']);
  await checkDescriptions(model.descriptions, 2);
});
