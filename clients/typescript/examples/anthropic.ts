// An agent loop on Anthropic's messages API (plain fetch, no SDK) whose one
// tool is run_python: each tool_use block is a program, run by spine serve
// with the agent's own tools answered here, and its answer goes back as a
// tool_result block (is_error when the program failed) until the model
// answers.
//
//   ANTHROPIC_API_KEY=... SPINE_URL=http://127.0.0.1:8080 node dist/examples/anthropic.js "What do 3 books and 2 pens cost?"

import { pathToFileURL } from "node:url";

import { Client, type Tools } from "../src/index.js";
import { agentTools, runPython, runPythonTool } from "./run_python.js";

export interface AgentOptions {
  prompt: string;
  spine: Client;
  tools: Tools;
  /** The API's address (default https://api.anthropic.com). */
  baseUrl: string;
  apiKey: string;
  model?: string;
  maxTurns?: number;
  /** Where each call and its result are told. */
  log?: (line: string) => void;
}

type Block =
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: { [key: string]: unknown } }
  | { type: string; [key: string]: unknown };

/** Runs the loop and returns the model's final answer. */
export async function agent(o: AgentOptions): Promise<string> {
  const tool = await runPythonTool(o.spine, o.tools);
  const messages: { role: string; content: unknown }[] = [{ role: "user", content: [{ type: "text", text: o.prompt }] }];
  for (let turn = 0; turn < (o.maxTurns ?? 8); turn++) {
    const resp = await fetch(`${o.baseUrl.replace(/\/+$/, "")}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": o.apiKey, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({
        model: o.model ?? "claude-sonnet-5-5",
        max_tokens: 4096,
        messages,
        tools: [{ name: tool.name, description: tool.description, input_schema: tool.schema }],
      }),
    });
    if (!resp.ok) {
      throw new Error(`messages API: ${resp.status} ${await resp.text()}`);
    }
    const msg = (await resp.json()) as { content: Block[] };
    messages.push({ role: "assistant", content: msg.content });
    const answer: string[] = [];
    const results: unknown[] = [];
    for (const b of msg.content) {
      if (b.type === "text") {
        answer.push((b as { text: string }).text);
      } else if (b.type === "tool_use") {
        const use = b as { id: string; name: string; input: { [key: string]: unknown } };
        const { text, isError } =
          use.name === tool.name
            ? await runPython(o.spine, use.input, o.tools)
            : { text: `no tool ${JSON.stringify(use.name)}: the only tool is ${tool.name}`, isError: true };
        o.log?.(`${use.name} ${JSON.stringify(use.input)}\n-> ${text}`);
        results.push({ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text }], is_error: isError });
      }
    }
    if (results.length === 0) {
      return answer.join("\n");
    }
    messages.push({ role: "user", content: results });
  }
  throw new Error("the model did not answer within maxTurns");
}

async function main(): Promise<void> {
  const apiKey = process.env.ANTHROPIC_API_KEY;
  if (!apiKey) {
    console.error("set ANTHROPIC_API_KEY (and SPINE_URL, default http://127.0.0.1:8080)");
    process.exit(2);
  }
  const answer = await agent({
    prompt: process.argv[2] ?? "What do 3 books and 2 pens cost?",
    spine: new Client({ baseUrl: process.env.SPINE_URL, token: process.env.SPINE_TOKEN }),
    tools: agentTools,
    baseUrl: process.env.ANTHROPIC_BASE_URL ?? "https://api.anthropic.com",
    apiKey,
    model: process.env.ANTHROPIC_MODEL,
    log: (line) => console.error(line),
  });
  console.log(answer);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
