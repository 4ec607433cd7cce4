// @spine-run/client: spine serve's HTTP API from TypeScript, with tools
// answered in the caller's process (docs/http.md, "Tools the caller answers").

import { Client, type ClientOptions } from "./client.js";
import type { RunOptions, RunResult } from "./types.js";

export { Client, Session, type ClientOptions } from "./client.js";
export { ApprovalRequired, SpineError } from "./errors.js";
export type * from "./types.js";

/**
 * Runs source on the spine serve at opts.baseUrl (default
 * http://127.0.0.1:8080), answering its client tools' calls: new
 * Client(opts).run(source, opts).
 */
export function run(source: string, opts: RunOptions & ClientOptions = {}): Promise<RunResult> {
  return new Client(opts).run(source, opts);
}
