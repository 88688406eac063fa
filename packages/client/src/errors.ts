/**
 * What the client throws. An HTTP error answer is a ProblemError carrying the
 * RFC 9457 fields the API sent (docs/API.md lists the `type` URIs); a request
 * that never got an answer is a NetworkError. Both say how many attempts were
 * made, so a caller can tell "refused at once" from "gave up after retrying".
 */

export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  [extension: string]: unknown;
}

export class ProblemError extends Error {
  override name = 'ProblemError';
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string | undefined;
  readonly instance: string | undefined;
  /** Every member of the problem object, extensions (e.g. `errors`) included. */
  readonly problem: ProblemDetails;

  constructor(
    problem: ProblemDetails,
    readonly attempts = 1,
    /** The Idempotency-Key the request carried, if any: retry later with this same key. */
    readonly idempotencyKey?: string,
  ) {
    super(`${problem.status} ${problem.title}${problem.detail ? `: ${problem.detail}` : ''}`);
    this.problem = problem;
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.instance = problem.instance;
  }

  /**
   * From any error answer. A body that is not a problem object (a proxy's HTML
   * 502, an empty 503) becomes `about:blank` with the HTTP status, as RFC 9457 says.
   */
  static from(status: number, statusText: string, body: unknown, attempts = 1, key?: string): ProblemError {
    const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const problem: ProblemDetails = {
      ...b,
      type: typeof b.type === 'string' ? b.type : 'about:blank',
      title: typeof b.title === 'string' ? b.title : statusText || `HTTP ${status}`,
      status: typeof b.status === 'number' ? b.status : status,
    };
    if (typeof b.detail !== 'string') delete problem.detail;
    return new ProblemError(problem, attempts, key);
  }
}

/** No HTTP answer at all after every attempt (refused, reset, dropped, timed out). */
export class NetworkError extends Error {
  override name = 'NetworkError';
  constructor(
    message: string,
    readonly attempts: number,
    readonly idempotencyKey?: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** waitForOrder ran out of time; `order` is the last view seen (not terminal). */
export class WaitTimeoutError extends Error {
  override name = 'WaitTimeoutError';
  constructor(
    message: string,
    readonly order: unknown,
  ) {
    super(message);
  }
}
