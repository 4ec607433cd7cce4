// An agent loop on OpenAI's Responses API (plain fetch, no SDK) whose one
// tool is the function run_python: each function_call item is a program,
// run by spine serve with the agent's own tools answered here, and its
// answer goes back as a function_call_output item until the model answers.
//
//   OPENAI_API_KEY=... SPINE_URL=http://127.0.0.1:8080 node dist/examples/openai.js "What do 3 books and 2 pens cost?"

import { pathToFileURL } from "node:url";

import { Client, type Tools } from "../src/index.js";
import { agentTools, runPython, runPythonTool } from "./run_python.js";

export interface AgentOptions {
  prompt: string;
  spine: Client;
  tools: Tools;
  /** The API's address, /v1 included (default https://api.openai.com/v1). */
  baseUrl: string;
  apiKey: string;
  model?: string;
  maxTurns?: number;
  /** Where each call and its result are told. */
  log?: (line: string) => void;
}

type Item =
  | { type: "message"; content: { type: string; text?: string }[] }
  | { type: "function_call"; call_id: string; name: string; arguments: string }
  | { type: string; [key: string]: unknown };

/** Runs the loop and returns the model's final answer. */
export async function agent(o: AgentOptions): Promise<string> {
  const tool = await runPythonTool(o.spine, o.tools);
  const input: unknown[] = [{ role: "user", content: o.prompt }];
  for (let turn = 0; turn < (o.maxTurns ?? 8); turn++) {
    const resp = await fetch(`${o.baseUrl.replace(/\/+$/, "")}/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${o.apiKey}` },
      body: JSON.stringify({
        model: o.model ?? "gpt-5.5",
        input,
        tools: [{ type: "function", name: tool.name, description: tool.description, parameters: tool.schema, strict: false }],
      }),
    });
    if (!resp.ok) {
      throw new Error(`responses API: ${resp.status} ${await resp.text()}`);
    }
    const out = (await resp.json()) as { output: Item[] };
    input.push(...out.output);
    const answer: string[] = [];
    let called = false;
    for (const item of out.output) {
      if (item.type === "message") {
        for (const c of (item as { content: { type: string; text?: string }[] }).content) {
          if (c.type === "output_text" && c.text) answer.push(c.text);
        }
      } else if (item.type === "function_call") {
        const call = item as { call_id: string; name: string; arguments: string };
        called = true;
        const { text } = await answerCall(o, tool.name, call);
        o.log?.(`${call.name} ${call.arguments}\n-> ${text}`);
        input.push({ type: "function_call_output", call_id: call.call_id, output: text });
      }
    }
    if (!called) {
      return answer.join("\n");
    }
  }
  throw new Error("the model did not answer within maxTurns");
}

/** One function_call: run_python's arguments arrive as a JSON string. */
async function answerCall(o: AgentOptions, name: string, call: { name: string; arguments: string }): Promise<{ text: string }> {
  if (call.name !== name) {
    return { text: `error: no tool ${JSON.stringify(call.name)}: the only tool is ${name}` };
  }
  let args: { [key: string]: unknown };
  try {
    args = JSON.parse(call.arguments);
  } catch (e) {
    return { text: `error: the arguments are not JSON: ${(e as Error).message}` };
  }
  const { text, isError } = await runPython(o.spine, args, o.tools);
  return { text: isError ? `error: ${text}` : text }; // the API has no is_error: the text says so
}

async function main(): Promise<void> {
  const apiKey = process.env.OPENAI_API_KEY;
  if (!apiKey) {
    console.error("set OPENAI_API_KEY (and SPINE_URL, default http://127.0.0.1:8080)");
    process.exit(2);
  }
  const answer = await agent({
    prompt: process.argv[2] ?? "What do 3 books and 2 pens cost?",
    spine: new Client({ baseUrl: process.env.SPINE_URL, token: process.env.SPINE_TOKEN }),
    tools: agentTools,
    baseUrl: process.env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
    apiKey,
    model: process.env.OPENAI_MODEL,
    log: (line) => console.error(line),
  });
  console.log(answer);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main();
}
