// What both agent loops share: the agent's own tools, answered in this
// process, run_python's definition for the model, and one run_python call
// turned into a run and its answer into the text the model reads back.

import { Client, SpineError, type JSONSchema, type Tools } from "../src/index.js";

/** What the agent's get_price knows. */
const prices: { [item: string]: number } = { book: 21, pen: 2, lamp: 35 };

/** The agent's tools: a program calls them, this process answers. */
export const agentTools: Tools = {
  get_price: {
    description: "The price of an item, in euros.",
    inputSchema: { type: "object", properties: { item: { type: "string", description: 'e.g. "book"' } }, required: ["item"] },
    outputSchema: { type: "integer" },
    readOnly: true,
    handler: ({ item }) => {
      const p = prices[String(item)];
      if (p === undefined) {
        const e = new Error(`no such item: ${JSON.stringify(item)} (the items: ${Object.keys(prices).join(", ")})`);
        e.name = "LookupError";
        throw e;
      }
      return p;
    },
  },
};

/** A tool's name and JSON Schema for the model, as both APIs take it. */
export interface ModelTool {
  name: string;
  description: string;
  schema: JSONSchema;
}

/**
 * run_python as the model sees it: the server's definition (GET /v1/tool:
 * the sandbox's rules, the server's own tools) and a line for each of the
 * agent's tools.
 */
export async function runPythonTool(spine: Client, tools: Tools): Promise<ModelTool> {
  const def = await spine.toolDefinition();
  const lines = Object.entries(tools).map(([name, t]) => `- ${stub(name, t.inputSchema, t.outputSchema)}: ${t.description ?? ""}`);
  return {
    name: def.name,
    description: `${def.description}\n\nThe program may also call these functions:\n${lines.join("\n")}`,
    schema: def.input_schema,
  };
}

const pyTypes: { [t: string]: string } = { string: "str", integer: "int", number: "float", boolean: "bool", array: "list", object: "dict" };

function pyType(s: JSONSchema | undefined): string {
  return (typeof s?.type === "string" && pyTypes[s.type]) || "Any";
}

/** get_price(item: str) -> int */
function stub(name: string, input?: JSONSchema, output?: JSONSchema): string {
  const props = (input?.properties ?? {}) as { [p: string]: JSONSchema };
  const args = Object.entries(props).map(([p, s]) => `${p}: ${pyType(s)}`);
  return `${name}(${args.join(", ")}) -> ${pyType(output)}`;
}

/** The arguments run_python takes (GET /v1/tool's input_schema). */
interface RunPythonArgs {
  source?: unknown;
  inputs?: { [key: string]: unknown };
  files?: { name: string; text?: string; data?: string }[];
}

/**
 * Runs one run_python call of the model with the agent's tools, and says
 * what the model reads back: the value and the output as JSON, or the
 * program's traceback (isError).
 */
export async function runPython(spine: Client, args: RunPythonArgs, tools: Tools): Promise<{ text: string; isError: boolean }> {
  if (typeof args.source !== "string") {
    return { text: 'run_python needs "source", the program', isError: true };
  }
  const files = args.files?.map((f) => ({
    name: f.name,
    data: f.text ?? Uint8Array.from(atob(f.data ?? ""), (c) => c.charCodeAt(0)),
  }));
  try {
    const r = await spine.run(args.source, { tools, inputs: args.inputs, files });
    return { text: JSON.stringify(r.stdout ? { value: r.value, stdout: r.stdout } : { value: r.value }), isError: false };
  } catch (e) {
    if (!(e instanceof SpineError) || e.status === 429 || e.status >= 500) {
      throw e; // not the program's doing: the agent, not the model, handles it
    }
    const out = e.result?.stdout ? e.result.stdout + "\n" : "";
    const what = e.kind === "python" ? (e.error.traceback ?? e.message).trimEnd() : `${e.kind}: ${e.error.message}`;
    return { text: out + what, isError: true };
  }
}
