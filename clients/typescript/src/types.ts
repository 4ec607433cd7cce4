// The shapes of spine serve's HTTP API (docs/http.md), as the server sends
// them (Wire*), and as this client hands them to its caller.

/** A JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** A JSON Schema: an object schema for a tool's arguments. */
export type JSONSchema = { [key: string]: unknown };

/** The error object of every failed or refused answer (docs/http.md, the status table). */
export interface ServerError {
  /** python, timeout, too_large, bad_request, overloaded, not_found, tool_wait, ... */
  kind: string;
  /** For a Python error: the exception's class. */
  type?: string;
  message: string;
  /** For a Python error: the line of the program it points to (0 when unknown). */
  line?: number;
  /** For a Python error: the formatted traceback. */
  traceback?: string;
}

/** The result of a client tool's call, as sent to a paused run: a value, or an error raised in the program. */
export type ToolResult =
  | { id: string; value: JSONValue }
  | { id: string; error: { message: string; type?: string } };

/** A call of a client tool that a paused run waits for. */
export interface PendingCall {
  id: string;
  name: string;
  arguments: { [key: string]: JSONValue };
}

/** A tool call a paused run waits in for its caller's approval (docs/http.md, "Approvals that wait"). */
export interface ApprovalRequest {
  /** "approval_1": the id a decision names. */
  id: string;
  /** The tool's name. */
  tool: string;
  /** The call's arguments as the server judged them. */
  arguments: { [key: string]: JSONValue };
  /** Why the call waits for a person. */
  reason: string;
}

/** An ApprovalRequest as RunOptions.approve is given it: with its run's id. */
export interface Approval extends ApprovalRequest {
  runId: string;
}

/** A decision sent to a run paused for approval: refused, the call raises PermissionError(reason) in the program. */
export interface ApprovalDecision {
  id: string;
  allow: boolean;
  reason?: string;
}

/**
 * Decides a call that waits for approval: true allows it, false refuses it,
 * or { allow, reason } (reason: the PermissionError's message in the program).
 */
export type Approve = (approval: Approval) => boolean | { allow: boolean; reason?: string } | Promise<boolean | { allow: boolean; reason?: string }>;

/** A file placed in the program's working directory, or one it left there. */
export interface SpineFile {
  /** Relative to the working directory, with slashes: "data/sales.csv". */
  name: string;
  data: Uint8Array;
}

/** A file to give a run: its data as bytes, or as text (written as UTF-8). */
export interface FileInput {
  name: string;
  data: Uint8Array | string;
}

/** One tool call the program made. */
export interface CallRecord {
  tool: string;
  /** From the run's start, in nanoseconds. */
  startNs: number;
  durationNs: number;
  /** Answered by an early read, before the program reached the call. */
  early: boolean;
  failed: boolean;
}

/** A value as a notebook shows it: its formats by MIME type (text/plain always). */
export type Display = { [mime: string]: string };

/** The answer of a run, success or not (docs/http.md, POST /v1/run), as the server sends it. */
export interface WireResponse {
  value: JSONValue;
  display?: Display;
  displayed?: Display[];
  displayed_left_out?: number;
  stdout: string;
  stderr: string;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  tool_calls: number;
  calls?: { tool: string; start_ns: number; duration_ns: number; early: boolean; failed: boolean }[];
  files?: { name: string; data: string }[];
  files_left_out?: number;
  error: ServerError | null;
  timing: { total_ms: number; run_ms: number };
  status?: "tool_calls" | "approval_required" | "done";
  run_id?: string;
  pending?: PendingCall[];
  approvals?: ApprovalRequest[];
}

/** What a run gave back. */
export interface RunResult {
  /** The value of the program's last expression; null for None or a value without a faithful JSON form. */
  value: JSONValue;
  /** The value as a notebook's Out[ ] shows it; absent for None. */
  display?: Display;
  /** What the program passed to display(), in order. */
  displayed: Display[];
  stdout: string;
  stderr: string;
  /** Set when the program wrote more than the server keeps (1 MiB). */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  toolCalls: number;
  calls: CallRecord[];
  /** What the program created or changed in its working directory. */
  files: SpineFile[];
  /**
   * Set when the run had client tools or could wait for approvals: its id,
   * the last answer's (with --session-store, a run another replica took
   * over has a new one).
   */
  runId?: string;
  /** How many times the run paused for its client tools or an approval: one POST of tool results or decisions each. */
  rounds: number;
  /** Milliseconds: the last request's own (totalMs) and the program's running (runMs). */
  timing: { totalMs: number; runMs: number };
  /** The server's last answer as it sent it. */
  raw: WireResponse;
}

/** What a tool's handler is told about the call besides its arguments. */
export interface ToolCallInfo {
  /** The call's id in the run ("call_3"). */
  id: string;
  /** The tool's name as the program called it. */
  name: string;
  /** The run's id. */
  runId: string;
}

/**
 * A tool the program calls and this process answers. Its stub in the
 * program (help(name)) comes from description and inputSchema, whose
 * properties give the positional order of its arguments.
 */
export interface Tool {
  description?: string;
  /** The arguments' JSON Schema, an object schema (default: no arguments). */
  inputSchema?: JSONSchema;
  /** The value's JSON Schema: the stub's return type. */
  outputSchema?: JSONSchema;
  /**
   * The tool only reads: early reads may call it before the program reaches
   * the call, so that one pause asks for every call a loop will make.
   */
  readOnly?: boolean;
  /**
   * Answers a call: its value (JSON; undefined is null) is the call's value
   * in the program; a throw raises there as RuntimeError "name: message"
   * (the Error's name left out when it is plain "Error").
   */
  handler: (args: { [key: string]: JSONValue }, call: ToolCallInfo) => unknown;
}

/** A run's tools, by the name the program calls them (dotted for a namespace: "crm.search"). */
export type Tools = { [name: string]: Tool };

/** What a run takes besides its source. */
export interface RunOptions {
  tools?: Tools;
  /** The program's global dict inputs. */
  inputs?: { [key: string]: unknown };
  files?: FileInput[];
  /** The run's time limit (the server's --max-timeout at most); pauses do not count. */
  timeoutMs?: number;
  /**
   * Early reads (docs/early-reads.md). Default: on when a tool is readOnly,
   * so that a loop of reads is one pause; else the server's default, off.
   */
  earlyReads?: boolean;
  /**
   * Decides each call the run waits in for approval (spine serve --ask).
   * Without it, such a pause throws an ApprovalRequired carrying the run's
   * id and approvals, for Client.decide.
   */
  approve?: Approve;
  /** Aborts the request under way; a paused run is left to the server's --tool-wait. */
  signal?: AbortSignal;
}

/** run_python as GET /v1/tool describes it, for an agent to declare to its model. */
export interface ToolDefinition {
  name: string;
  description: string;
  input_schema: JSONSchema;
  output_schema: JSONSchema;
}

/**
 * What POST /v1/tool/call?file_data= adds to its answer: nothing (none, the
 * default), the images' data (images), or the files' data too (all).
 */
export type FileData = "none" | "images" | "all";

/** An image a program made, as result.images lists it; with its data when asked for (fileData). */
export interface ToolImage {
  /** Where it comes from: a file the program wrote, a display() of it, or the run's value. */
  source: "file" | "display" | "value";
  /** The file's name, for source "file". */
  name?: string;
  /** Which display() (from 1), for source "display". */
  index?: number;
  mime_type: "image/png" | "image/jpeg" | "image/gif" | "image/webp";
  width: number;
  height: number;
  bytes: number;
  /** The image's bytes in base64, as the model APIs take them (only in ToolAnswer.images). */
  data?: string;
}

/** The answer of POST /v1/tool/call: text is what the model reads back. */
export interface ToolAnswer {
  text: string;
  is_error: boolean;
  result: { [key: string]: JSONValue } | null;
  /** With fileData images or all: each of result.images with its data ([] for none). */
  images?: ToolImage[];
  /** With fileData all: every file the program left, its data in base64 ([] for none). */
  files?: { name: string; data: string }[];
}
