import type { ErrorCode, Problem } from './types.js';

/** What a {@link SandboxError} is built from. */
export interface SandboxErrorInit {
  code: ErrorCode;
  status: number;
  message: string;
  title?: string;
  type?: string;
  field?: string;
  executionId?: string;
  retryAfter?: number;
  problem?: Problem;
  cause?: unknown;
}

/**
 * A failure reported by the service (from its `application/problem+json` body), or by the
 * client itself: `network_error` (the request could not be sent or its response not read,
 * `status` 0) and `invalid_response` (the server answered something that is not the API).
 */
export class SandboxError extends Error {
  /** Stable error code, e.g. `invalid_file_name`, `queue_full`. */
  readonly code: ErrorCode;
  /** HTTP status (0 when no response was received). */
  readonly status: number;
  /** The problem's human-readable detail. */
  readonly detail: string;
  /** The problem's title. */
  readonly title: string | undefined;
  /** The problem's type URI, e.g. `urn:sandbox:error:queue_full`. */
  readonly type: string | undefined;
  /** The request field at fault, e.g. `files["../x"]` or `timeout`. */
  readonly field: string | undefined;
  /** The execution's id, when the failure happened after one was assigned. */
  readonly executionId: string | undefined;
  /** Seconds to wait before retrying (from `Retry-After`), for `queue_full` and `rate_limited`. */
  readonly retryAfter: number | undefined;
  /** The raw problem body, when there was one. */
  readonly problem: Problem | undefined;

  constructor(init: SandboxErrorInit) {
    super(`${init.code}: ${init.message}`, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'SandboxError';
    this.code = init.code;
    this.status = init.status;
    this.detail = init.message;
    this.title = init.title;
    this.type = init.type;
    this.field = init.field;
    this.executionId = init.executionId;
    this.retryAfter = init.retryAfter;
    this.problem = init.problem;
  }

  /** Builds the error from a problem body (and the response's `Retry-After`, if any). */
  static fromProblem(problem: Problem, status?: number, retryAfter?: number): SandboxError {
    const init: SandboxErrorInit = {
      code: problem.code,
      status: typeof problem.status === 'number' ? problem.status : (status ?? 0),
      message: problem.detail ?? problem.title ?? problem.code,
      title: problem.title,
      type: problem.type,
      problem,
    };
    if (problem.field !== undefined) init.field = problem.field;
    if (problem.executionId !== undefined) init.executionId = problem.executionId;
    if (retryAfter !== undefined) init.retryAfter = retryAfter;
    return new SandboxError(init);
  }
}

/** Whether `value` looks like a problem body of the service. */
export function isProblem(value: unknown): value is Problem {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { code?: unknown }).code === 'string' &&
    (typeof (value as { detail?: unknown }).detail === 'string' ||
      typeof (value as { title?: unknown }).title === 'string')
  );
}

/** Parses a `Retry-After` header (delay in seconds, or an HTTP date) into seconds. */
export function parseRetryAfter(value: string | null): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const date = Date.parse(v);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - Date.now()) / 1000));
}
