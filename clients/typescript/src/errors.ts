import type { RunResult, ServerError } from "./types.js";

/**
 * A request spine serve failed or refused: status is the HTTP status, error
 * the server's error object (kind "python" for a program that raised, with
 * its type and traceback). For a run, result holds what it left: its
 * stdout and stderr so far, its tool calls.
 */
export class SpineError extends Error {
  override name = "SpineError";
  readonly status: number;
  readonly error: ServerError;
  readonly result?: RunResult;
  /** Seconds to wait before trying again, from Retry-After (429, 503). */
  readonly retryAfter?: number;

  constructor(status: number, error: ServerError, opts: { result?: RunResult; retryAfter?: number } = {}) {
    super(describe(status, error));
    this.status = status;
    this.error = error;
    this.result = opts.result;
    this.retryAfter = opts.retryAfter;
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
