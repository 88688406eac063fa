import type { Json, LedgerErrorCode, Scope } from './types.ts';

/** The ledger's one error type. `code` is stable; messages are for humans and carry no payloads. */
export class LedgerError extends Error {
  override name = 'LedgerError';
  readonly code: LedgerErrorCode;
  /** For `in_progress`: when a retry is likely to find the first attempt finished. */
  readonly retryAfterMs?: number;
  readonly scope?: Scope;

  constructor(
    code: LedgerErrorCode,
    message: string,
    options: { retryAfterMs?: number; scope?: Scope; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
    if (options.scope !== undefined) this.scope = options.scope;
  }
}

export function isLedgerError(err: unknown, code?: LedgerErrorCode): err is LedgerError {
  return err instanceof LedgerError && (code === undefined || err.code === code);
}

/**
 * A final business outcome in local mode. Thrown by the `runLocal` body, it COMMITS the transaction
 * as it stands with the record `failed`; `runLocal` then throws it on the first call and every
 * replay. To leave nothing at all, throw any other error.
 */
export class FinalFailure<T extends Json = Json> extends Error {
  override name = 'FinalFailure';
  readonly result: T;
  readonly replayed: boolean;

  constructor(result: T, options: { message?: string; replayed?: boolean } = {}) {
    super(options.message ?? 'operation failed with a final business outcome');
    this.result = result;
    this.replayed = options.replayed ?? false;
  }
}

/**
 * True when an error from `perform` proves the effect did NOT happen (the
 * request never left, or the provider rejected it before acting): a
 * `LedgerError('invalid_input')` or any error with `definite: true`. Such a
 * claim is released instead of being marked unknown.
 */
export function isDefiniteFailure(err: unknown): boolean {
  if (isLedgerError(err, 'invalid_input')) return true;
  return typeof err === 'object' && err !== null && (err as { definite?: unknown }).definite === true;
}
