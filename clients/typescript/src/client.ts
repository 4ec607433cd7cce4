import { ApprovalRequired, SpineError } from "./errors.js";
import type {
  Approval,
  ApprovalDecision,
  Approve,
  FileData,
  FileInput,
  PendingCall,
  RunOptions,
  RunResult,
  ServerError,
  ToolAnswer,
  ToolDefinition,
  ToolResult,
  Tools,
  WireResponse,
} from "./types.js";

/** How a Client reaches spine serve. */
export interface ClientOptions {
  /** The server's address (default http://127.0.0.1:8080). */
  baseUrl?: string;
  /** The server's bearer token (--token-file, $SPINE_TOKEN), when it has one. */
  token?: string;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
  /**
   * How many times to send a paused run's tool results or decisions again
   * when every slot of the server is busy (429 overloaded: the run waits)
   * or the server drains (503 closed: with --session-store the next replica
   * continues the run), after Retry-After each time, within 0 to 30 seconds
   * (default 60, the Python client's too). One answered 409 naming the id
   * its run continues as (another replica took it over) is sent there.
   */
  retries?: number;
}

/** ClientOptions.retries' default. */
const defaultRetries = 60;

/** The longest wait between two sendings of a continuation, whatever Retry-After says. */
const maxRetryAfterMs = 30_000;

/**
 * The milliseconds to wait before sending refused tool results again:
 * Retry-After's seconds within [0, 30] (a negative one is 0, a huge one 30:
 * setTimeout would fire at once past 2^31 ms), 1 second without one.
 * @internal
 */
export function retryWaitMs(retryAfter: number | undefined): number {
  if (retryAfter === undefined || Number.isNaN(retryAfter)) {
    return 1000;
  }
  return Math.min(Math.max(retryAfter * 1000, 0), maxRetryAfterMs);
}

/** Tool results, or decisions on approvals, sent to a paused run. */
interface Sent {
  runId: string;
  results?: ToolResult[];
  decisions?: ApprovalDecision[];
}

/** What drives a run on from a pause. */
type Continuing = Pick<RunOptions, "tools" | "approve" | "signal">;

/** One answer of the server: its status, its JSON body and its Retry-After. */
interface Answer {
  status: number;
  body: unknown;
  retryAfter?: number;
}

/**
 * A client of spine serve's HTTP API (docs/http.md). run drives a run with
 * client tools to its end: each pause's calls are answered by the tools'
 * handlers, at once, and their results sent back, until the run is done.
 */
export class Client {
  readonly baseUrl: string;
  private readonly token?: string;
  private readonly fetch: typeof fetch;
  private readonly retries: number;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.token = opts.token;
    this.fetch = opts.fetch ?? globalThis.fetch;
    this.retries = opts.retries ?? defaultRetries;
    if (typeof this.fetch !== "function") {
      throw new TypeError("no fetch: Node 18 or later has one, or pass ClientOptions.fetch");
    }
  }

  /** Runs source (POST /v1/run); a program that raises throws a SpineError of kind "python". */
  run(source: string, opts: RunOptions = {}): Promise<RunResult> {
    return this.drive("/v1/run", source, opts);
  }

  /** A new session (POST /v1/sessions), whose runs keep what each defines for the next. */
  async createSession(opts: { signal?: AbortSignal } = {}): Promise<Session> {
    const a = await this.request("POST", "/v1/sessions", { signal: opts.signal });
    return new Session(this, (a.body as { id: string }).id);
  }

  /** A session already made, by its id (its token's own). */
  session(id: string): Session {
    return new Session(this, id);
  }

  /**
   * A new session from a snapshot (POST /v1/sessions/restore), under id
   * when given (the token's own, or a new one).
   */
  async restoreSession(snapshot: Uint8Array, opts: { id?: string; signal?: AbortSignal } = {}): Promise<Session> {
    const q = opts.id === undefined ? "" : `?id=${encodeURIComponent(opts.id)}`;
    const a = await this.request("POST", "/v1/sessions/restore" + q, {
      body: snapshot,
      contentType: "application/octet-stream",
      signal: opts.signal,
    });
    return new Session(this, (a.body as { id: string }).id);
  }

  /** run_python's definition (GET /v1/tool): the server's tools' stubs, the sandbox's rules. */
  async toolDefinition(opts: { signal?: AbortSignal } = {}): Promise<ToolDefinition> {
    return (await this.request("GET", "/v1/tool", { signal: opts.signal })).body as ToolDefinition;
  }

  /**
   * Runs run_python's arguments as a model sent them (POST /v1/tool/call),
   * with the server's tools. fileData asks for the images' data (images)
   * or the files' too (all), beside the text (docs/http.md).
   */
  async callTool(args: unknown, opts: { fileData?: FileData; signal?: AbortSignal } = {}): Promise<ToolAnswer> {
    const q = opts.fileData === undefined ? "" : `?file_data=${encodeURIComponent(opts.fileData)}`;
    return (await this.request("POST", "/v1/tool/call" + q, { json: args, signal: opts.signal })).body as ToolAnswer;
  }

  /**
   * Sends results, the tool results of the paused run runId (a SpineError's
   * runId and results, when the client gave up sending them), and drives the
   * run on as run does, its next pauses answered by opts.tools and
   * opts.approve. Its rounds count the pause these results answer.
   */
  async resume(runId: string, results: ToolResult[], opts: Continuing = {}): Promise<RunResult> {
    const sent = { runId, results };
    return this.driveFrom(await this.continueRun(sent, opts.signal), opts, 1, sent);
  }

  /**
   * Sends decisions on the approvals the paused run runId waits for (an
   * ApprovalRequired's runId and approvals, decided later), and drives the
   * run on as run does, its next pauses answered by opts.tools and
   * opts.approve. Its rounds count the pause decided here.
   */
  async decide(runId: string, decisions: ApprovalDecision[], opts: Continuing = {}): Promise<RunResult> {
    const sent = { runId, decisions };
    return this.driveFrom(await this.continueRun(sent, opts.signal), opts, 1, sent);
  }

  /**
   * Runs source at path, a run endpoint, answering its pauses until it ends (Session.run's).
   * @internal
   */
  async drive(path: string, source: string, opts: RunOptions): Promise<RunResult> {
    return this.driveFrom(await this.request("POST", path, { json: runBody(source, opts), signal: opts.signal, run: true }), opts, 0);
  }

  /**
   * Answers a run's pauses from its answer a on, each at the run id its
   * answer names (with --session-store a replica that took the run over
   * names a new one), until it ends; sent is the last continuation sent,
   * which a SpineError carries with its run's id.
   */
  private async driveFrom(a: Answer, opts: Continuing, rounds: number, sent?: Sent): Promise<RunResult> {
    const tools = opts.tools ?? {};
    for (;;) {
      if (typeof a.body !== "object" || a.body === null || Array.isArray(a.body)) {
        throw new SpineError(a.status, { kind: "protocol", message: "the answer is not a run's JSON object" }, { ...sent });
      }
      const resp = a.body as WireResponse;
      if (resp.status === "tool_calls") {
        if (!resp.run_id || !Array.isArray(resp.pending)) {
          throw new SpineError(a.status, { kind: "protocol", message: "a pause without run_id or pending" });
        }
        sent = { runId: resp.run_id, results: await answerCalls(tools, resp.pending, resp.run_id) };
      } else if (resp.status === "approval_required") {
        if (!resp.run_id || !Array.isArray(resp.approvals)) {
          throw new SpineError(a.status, { kind: "protocol", message: "a pause for approval without run_id or approvals" });
        }
        sent = { runId: resp.run_id, decisions: await decideApprovals(opts.approve, resp, rounds) };
      } else {
        const result = toResult(resp, rounds);
        if (a.status >= 300 || resp.error) {
          const runId = resp.run_id ?? sent?.runId;
          throw new SpineError(a.status, resp.error ?? unexpected(a), { result, retryAfter: a.retryAfter, ...sent, runId });
        }
        return result;
      }
      rounds++;
      a = await this.continueRun(sent, opts.signal);
    }
  }

  /**
   * POST /v1/runs/{runId}/tool_results (or /approvals, for decisions),
   * again after Retry-After while the server is overloaded (429) or drains
   * (503 closed), at most retries times; sent at once to the id a 409
   * conflict names in run_id (movedTo), at most maxHops times. Its other refusals, 421
   * run_elsewhere and 410 run_lost included (the run ended with its
   * replica), are not sent again: driveFrom throws them.
   */
  private async continueRun(sent: Sent, signal?: AbortSignal): Promise<Answer> {
    const [what, json] = sent.decisions ? ["approvals", { approvals: sent.decisions }] : ["tool_results", { results: sent.results }];
    for (let attempt = 0, hops = 0; ; attempt++) {
      const path = `/v1/runs/${encodeURIComponent(sent.runId)}/${what}`;
      let a: Answer;
      try {
        a = await this.request("POST", path, { json, signal, run: true });
      } catch (e) {
        if (e instanceof SpineError) {
          e.runId ??= sent.runId;
          e.results ??= sent.results;
          e.decisions ??= sent.decisions;
        }
        throw e;
      }
      const moved = movedTo(a, sent.runId);
      if (moved !== undefined && hops < maxHops) {
        sent.runId = moved;
        hops++;
        attempt--; // a hop is not a retry
        continue;
      }
      if (!sentAgain(a) || attempt >= this.retries) {
        return a;
      }
      await sleep(retryWaitMs(a.retryAfter), signal);
    }
  }

  /**
   * Sends one request. A status of 300 or more throws a SpineError, except
   * for a run (opts.run) whose body is a run's answer: drive reads it.
   * @internal
   */
  async request(
    method: string,
    path: string,
    opts: { json?: unknown; body?: Uint8Array; contentType?: string; signal?: AbortSignal; run?: boolean; bytes?: boolean } = {},
  ): Promise<Answer> {
    const headers: Record<string, string> = {};
    if (this.token !== undefined) {
      headers["Authorization"] = `Bearer ${this.token}`;
    }
    let body: string | Uint8Array | undefined = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers["Content-Type"] = "application/json";
    } else if (opts.contentType) {
      headers["Content-Type"] = opts.contentType;
    }
    // A redirect is not followed: a proxy's 307 must not send the run's
    // source, inputs, files and token to another address. "manual" rather
    // than "error", with which Node's fetch fails a 421 answer to a POST
    // (it sends the request again on a new connection, as the Fetch
    // standard says, without its body).
    const resp = await this.fetch(this.baseUrl + path, { method, headers, body, signal: opts.signal, redirect: "manual" });
    if (resp.type === "opaqueredirect" || (resp.status >= 300 && resp.status < 400)) {
      await resp.body?.cancel();
      const where = resp.headers.get("Location") ?? "an address this runtime does not show";
      throw new SpineError(resp.status, {
        kind: "http",
        message: `${method} ${path}: a redirect to ${where}, which the client does not follow (the request would go there whole): point baseUrl at the server itself`,
      });
    }
    const retry = Number(resp.headers.get("Retry-After"));
    const retryAfter = resp.headers.has("Retry-After") && Number.isFinite(retry) ? retry : undefined;
    if (opts.bytes && resp.ok) {
      return { status: resp.status, body: new Uint8Array(await resp.arrayBuffer()), retryAfter };
    }
    const text = await resp.text();
    let parsed: unknown = undefined;
    try {
      parsed = text === "" ? null : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const a: Answer = { status: resp.status, body: parsed, retryAfter };
    if (resp.status < 300 && parsed !== undefined) {
      return a;
    }
    const e = (parsed as { error?: ServerError } | undefined)?.error;
    if (opts.run && e && typeof (parsed as WireResponse).stdout === "string") {
      return a;
    }
    throw new SpineError(resp.status, e ?? { kind: "http", message: `${method} ${path}: ${resp.status} ${clip(text)}` }, { retryAfter });
  }
}

/** A session of spine serve: its runs keep what each defines for the next (docs/sessions.md). */
export class Session {
  constructor(
    readonly client: Client,
    readonly id: string,
  ) {}

  /** Runs source in the session (POST /v1/sessions/{id}/run); the session is busy until the run ends. */
  run(source: string, opts: RunOptions = {}): Promise<RunResult> {
    return this.client.drive(`/v1/sessions/${encodeURIComponent(this.id)}/run`, source, opts);
  }

  /** The session's state as bytes (GET /v1/sessions/{id}/snapshot), for Client.restoreSession. */
  async snapshot(opts: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const a = await this.client.request("GET", `/v1/sessions/${encodeURIComponent(this.id)}/snapshot`, {
      signal: opts.signal,
      bytes: true,
    });
    return a.body as Uint8Array;
  }

  /** Ends the session at once (DELETE /v1/sessions/{id}). */
  async delete(opts: { signal?: AbortSignal } = {}): Promise<void> {
    await this.client.request("DELETE", `/v1/sessions/${encodeURIComponent(this.id)}`, { signal: opts.signal });
  }
}

/** The JSON body of a run request. */
function runBody(source: string, opts: RunOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { source };
  if (opts.inputs !== undefined) body.inputs = opts.inputs;
  if (opts.timeoutMs !== undefined) body.timeout_ms = opts.timeoutMs;
  if (opts.files !== undefined) body.files = opts.files.map(fileBody);
  const tools = Object.entries(opts.tools ?? {});
  if (tools.length > 0) {
    body.tools = tools.map(([name, t]) => {
      const decl: Record<string, unknown> = {
        name,
        description: t.description ?? "",
        input_schema: t.inputSchema ?? { type: "object", properties: {} },
      };
      if (t.outputSchema !== undefined) decl.output_schema = t.outputSchema;
      if (t.readOnly) decl.read_only = true;
      return decl;
    });
  }
  const early = opts.earlyReads ?? (tools.some(([, t]) => t.readOnly) ? true : undefined);
  if (early !== undefined) body.early_reads = early;
  return body;
}

/** How many times one continuation follows its run to the id it continues as (movedTo). */
const maxHops = 8;

/**
 * The run id a continuation of run runId answered a is sent to, the same,
 * at once: with --session-store, 409 conflict naming another run_id
 * (another replica took the run over and continues it under that id; its
 * answer did not reach the client, its replica stopped first).
 */
function movedTo(a: Answer, runId: string): string | undefined {
  const body = a.body as WireResponse | null;
  const moved = body?.run_id;
  if (a.status === 409 && body?.error?.kind === "conflict" && typeof moved === "string" && moved !== "" && moved !== runId) {
    return moved;
  }
  return undefined;
}

/**
 * Whether a continuation answered a is sent again, the same, after
 * Retry-After: 429 overloaded (every run slot busy: the run waits) or 503
 * closed (the replica drains; with --session-store it handed the run over,
 * and the next replica the request reaches continues it).
 */
function sentAgain(a: Answer): boolean {
  const kind = (a.body as WireResponse | null)?.error?.kind;
  return (a.status === 429 && kind === "overloaded") || (a.status === 503 && kind === "closed");
}

/**
 * The decisions on a pause's approvals, approve called on each in order;
 * without approve, the ApprovalRequired that carries them.
 */
async function decideApprovals(approve: Approve | undefined, resp: WireResponse, rounds: number): Promise<ApprovalDecision[]> {
  const runId = resp.run_id!;
  const approvals: Approval[] = resp.approvals!.map((a) => ({ ...a, runId }));
  if (!approve || approvals.length === 0) {
    const message = approve ? "a pause for approval that names no call" : undefined;
    throw new ApprovalRequired(runId, approvals, toResult(resp, rounds), message);
  }
  const decisions: ApprovalDecision[] = [];
  for (const a of approvals) {
    decisions.push(decisionOf(a, await approve(a)));
  }
  return decisions;
}

/** The decision sent for a from what approve returned: a boolean, or { allow, reason }. */
function decisionOf(a: Approval, d: unknown): ApprovalDecision {
  const o = typeof d === "object" && d !== null ? (d as { allow?: unknown; reason?: unknown }) : undefined;
  const allow = typeof d === "boolean" ? d : o?.allow;
  const reason = o?.reason;
  if (typeof allow !== "boolean" || (reason !== undefined && typeof reason !== "string")) {
    throw new TypeError(
      `approve must return true, false or { allow, reason } with a string reason, not ${String(JSON.stringify(d))} (for ${a.tool}'s call ${a.id} of run ${a.runId}, which still waits)`,
    );
  }
  return reason ? { id: a.id, allow, reason } : { id: a.id, allow };
}

/** Answers every pending call at once: each a value, or an error when its handler threw. */
async function answerCalls(tools: Tools, pending: PendingCall[], runId: string): Promise<ToolResult[]> {
  return Promise.all(
    pending.map(async (call) => {
      const tool = Object.prototype.hasOwnProperty.call(tools, call.name) ? tools[call.name] : undefined;
      if (!tool) {
        return { id: call.id, error: { message: `this client has no tool ${JSON.stringify(call.name)}`, type: "LookupError" } };
      }
      let value: unknown;
      try {
        value = await tool.handler(call.arguments, { id: call.id, name: call.name, runId });
      } catch (e) {
        return { id: call.id, error: errorResult(e) };
      }
      try {
        // The value goes as JSON; one that has none (a BigInt, a cycle) is the call's error.
        return { id: call.id, value: JSON.parse(JSON.stringify(value === undefined ? null : value) ?? "null") };
      } catch (e) {
        return { id: call.id, error: { message: `${call.name}'s value is not JSON: ${(e as Error).message}`, type: "TypeError" } };
      }
    }),
  );
}

/** A thrown value as a tool result's error: its message, and its class unless plain Error. */
function errorResult(e: unknown): { message: string; type?: string } {
  if (e instanceof Error) {
    const message = e.message || e.name || "the tool failed";
    return e.name && e.name !== "Error" ? { message, type: e.name } : { message };
  }
  return { message: String(e) || "the tool failed" };
}

function toResult(r: WireResponse, rounds: number): RunResult {
  return {
    value: r.value ?? null,
    display: r.display,
    displayed: r.displayed ?? [],
    stdout: r.stdout ?? "",
    stderr: r.stderr ?? "",
    stdoutTruncated: r.stdout_truncated ?? false,
    stderrTruncated: r.stderr_truncated ?? false,
    toolCalls: r.tool_calls ?? 0,
    calls: (r.calls ?? []).map((c) => ({
      tool: c.tool,
      startNs: c.start_ns,
      durationNs: c.duration_ns,
      early: c.early,
      failed: c.failed,
    })),
    files: (r.files ?? []).map((f) => ({ name: f.name, data: fromBase64(f.data) })),
    runId: r.run_id,
    rounds,
    timing: { totalMs: r.timing?.total_ms ?? 0, runMs: r.timing?.run_ms ?? 0 },
    raw: r,
  };
}

function unexpected(a: Answer): ServerError {
  return { kind: "http", message: `status ${a.status} with no error` };
}

function fileBody(f: FileInput): { name: string; data: string } {
  const bytes = typeof f.data === "string" ? new TextEncoder().encode(f.data) : f.data;
  return { name: f.name, data: toBase64(bytes) };
}

function toBase64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) {
    s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const b = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) {
    b[i] = bin.charCodeAt(i);
  }
  return b;
}

function clip(s: string): string {
  return s.length > 200 ? s.slice(0, 200) + "…" : s;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

