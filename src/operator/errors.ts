/** The operator service's one error type; `code` is stable (the CLI's exit status and the API's problem type follow it). */
export type OpsErrorCode =
  /** Bad arguments: missing reason or actor, unsupported operation type, malformed key. */
  | 'invalid_input'
  | 'not_found'
  /** The record or order is not in a state this action applies to (e.g. resolving a succeeded record). */
  | 'invalid_state'
  /** A live attempt holds the claim; retry after `retryAfterMs`. */
  | 'in_progress'
  /** A dependency (provider, Temporal) failed; nothing was changed. */
  | 'unavailable';

export class OpsError extends Error {
  override name = 'OpsError';
  readonly code: OpsErrorCode;
  readonly retryAfterMs?: number;

  constructor(code: OpsErrorCode, message: string, options: { cause?: unknown; retryAfterMs?: number } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
  }
}

export function isOpsError(err: unknown, code?: OpsErrorCode): err is OpsError {
  return err instanceof OpsError && (code === undefined || err.code === code);
}
