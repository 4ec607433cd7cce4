import type { Approval, ApprovalDecision, RunResult, ServerError, ToolResult } from "./types.js";

/**
 * A request spine serve failed or refused: status is the HTTP status, error
 * the server's error object (kind "python" for a program that raised, with
 * its type and traceback). For a run, result holds what it left: its
 * stdout and stderr so far, its tool calls.
 *
 * An error that answered a run's tool results carries runId and results,
 * those the client last sent, and one that answered its decisions on
 * approvals decisions: when it gave up sending them (429 overloaded or 503
 * closed after its retries) the run is still paused, and
 * Client.resume(runId, results) or Client.decide(runId, decisions) sends
 * them again. A continuation that reached a replica other than the run's
 * is kind run_elsewhere (421), one that reached its replica after it
 * restarted run_lost (410): the run ended with its replica.
 */
export class SpineError extends Error {
  override name = "SpineError";
  readonly status: number;
  readonly error: ServerError;
  readonly result?: RunResult;
  /** Seconds to wait before trying again, from Retry-After (429, 503). */
  readonly retryAfter?: number;
  /** The run's id, once a run with client tools has one. */
  runId?: string;
  /** The tool results last sent to the run runId, when the error answered them. */
  results?: ToolResult[];
  /** The decisions last sent to the run runId, when the error answered them. */
  decisions?: ApprovalDecision[];

  constructor(
    status: number,
    error: ServerError,
    opts: { result?: RunResult; retryAfter?: number; runId?: string; results?: ToolResult[]; decisions?: ApprovalDecision[] } = {},
  ) {
    super(describe(status, error));
    this.status = status;
    this.error = error;
    this.result = opts.result;
    this.retryAfter = opts.retryAfter;
    this.runId = opts.runId;
    this.results = opts.results;
    this.decisions = opts.decisions;
  }

  /** The error's kind: python, timeout, overloaded, not_found, tool_wait, ... */
  get kind(): string {
    return this.error.kind;
  }
}

function describe(status: number, e: ServerError): string {
  if (e.kind === "python") {
    return e.type ? `${e.type}: ${e.message}` : e.message;
  }
  return `spine serve: ${status} ${e.kind}: ${e.message}`;
}

/**
 * A run waits for a person's approval of a tool call (status
 * "approval_required", docs/http.md "Approvals that wait") and its run had
 * no approve to ask. The run stays paused until the server's --tool-wait:
 * Client.decide(runId, approvals.map((a) => ({ id: a.id, allow, reason })))
 * decides it and drives it on. status is the pause's (200), kind
 * "approval_required", result what the run left so far (its stdout).
 */
export class ApprovalRequired extends SpineError {
  override name = "ApprovalRequired";
  override runId: string;
  /** The calls the run waits in. */
  readonly approvals: Approval[];

  constructor(runId: string, approvals: Approval[], result: RunResult, message?: string) {
    const calls = approvals.map((a) => `${a.tool} (${a.id})`).join(", ") || "no call";
    super(200, {
      kind: "approval_required",
      message: message ?? `run ${runId} waits for a person's approval of ${calls}: pass approve to decide it, or answer later with decide(runId, decisions)`,
    }, { result, runId });
    this.runId = runId;
    this.approvals = approvals;
  }
}
