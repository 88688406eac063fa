/**
 * The Idempotency-Key header and the one transaction an idempotent request's writes run in.
 *
 * Node joins repeated headers with ", ", so repeats are detected on the raw header list. The IETF
 * draft's sf-string form (`"abc"`) and the bare value most clients send (`abc`) name the SAME key;
 * a malformed sf-string is a 400, never guessed at.
 */
import type { FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { PoolClient } from '../db/index.ts';
import { ProblemError } from '../http/problems.ts';
import { isLedgerError, type Json, type Ledger, type Scope } from 'onceflow';
import { idempotentLedgerInput, type IdempotentRequest } from '../restore/memo.ts';
import { RECOVERY_RETRY_AFTER_SECONDS, type RecoveryGate } from '../restore/gate.ts';

const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;

export function readIdempotencyKey(request: FastifyRequest): string {
  const raw = request.raw.rawHeaders;
  const values: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'idempotency-key') values.push(raw[i + 1]!);
  }
  if (values.length === 0) {
    throw new ProblemError('invalidIdempotencyKey', 'Send an Idempotency-Key header (for example a UUID).');
  }
  if (values.length > 1) {
    throw new ProblemError('invalidIdempotencyKey', 'Send the Idempotency-Key header exactly once.');
  }
  const key = decodeKey(values[0]!);
  if (key.length === 0)
    throw new ProblemError('invalidIdempotencyKey', 'The Idempotency-Key must not be empty.');
  if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
    throw new ProblemError(
      'invalidIdempotencyKey',
      `The Idempotency-Key must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`,
    );
  }
  if (!VISIBLE_ASCII.test(key)) {
    throw new ProblemError(
      'invalidIdempotencyKey',
      'The Idempotency-Key may only contain visible ASCII characters (0x21 to 0x7E).',
    );
  }
  return key;
}

/** `"..."` -> its sf-string content; anything else unchanged. Throws on a malformed sf-string. */
function decodeKey(value: string): string {
  if (!value.startsWith('"')) return value;
  let out = '';
  for (let i = 1; i < value.length; i++) {
    const c = value[i]!;
    if (c === '\\') {
      const next = value[i + 1];
      if (next !== '"' && next !== '\\') {
        throw new ProblemError(
          'invalidIdempotencyKey',
          'The quoted Idempotency-Key has a bad escape: inside quotes only \\" and \\\\ may follow a backslash.',
        );
      }
      out += next;
      i++;
    } else if (c === '"') {
      if (i !== value.length - 1) {
        throw new ProblemError(
          'invalidIdempotencyKey',
          'The quoted Idempotency-Key must end at its closing quote (no parameters or trailing characters).',
        );
      }
      return out;
    } else {
      // Anything else is checked like a bare key (visible ASCII) by readIdempotencyKey.
      out += c;
    }
  }
  throw new ProblemError(
    'invalidIdempotencyKey',
    'The quoted Idempotency-Key has no closing quote. Send "abc" (a structured-field string) or abc.',
  );
}

/**
 * Refuses a new create with 503 while a restore's recovery is pending, so a retry gets its original
 * answer once rebuilt; a key the database has is a replay and goes through.
 */
export async function refuseWhileRecovering(gate: RecoveryGate, ledger: Ledger, scope: Scope): Promise<void> {
  if (!(await gate.pending())) return;
  if (await ledger.get(scope)) return;
  throw new ProblemError(
    'recoveryPending',
    'The service is recovering from a database restore. Retry later with the same Idempotency-Key: ' +
      'a request accepted before gets its original answer.',
    {},
    { 'retry-after': String(RECOVERY_RETRY_AFTER_SECONDS) },
  );
}

/**
 * Runs `body` once per key: the idempotency record and `body`'s writes commit together or not at all.
 * Same request again: the stored response. Another request: 422 keyReused. The first still running:
 * 409 inProgress. `body` throws: nothing stored, rethrown.
 */
export async function idempotentTransaction<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  request: IdempotentRequest,
  body: (
    tx: PoolClient,
    first: pg.QueryResult[],
    withCommit: (statement: pg.QueryConfig) => void,
  ) => Promise<T>,
  /** Sent with BEGIN and the claim, in one write (the ledger's `first`); their results are body's second argument. */
  first?: readonly pg.QueryConfig[],
): Promise<{ result: T; replayed: boolean }> {
  try {
    return await ledger.runLocal<T>(scope, idempotentLedgerInput(request), body, first ? { first } : {});
  } catch (err) {
    throw asProblem(err);
  }
}

/** The ledger's answers about the key, as the HTTP contract spells them; anything else unchanged. */
function asProblem(err: unknown): unknown {
  if (isLedgerError(err, 'conflict')) {
    return new ProblemError(
      'keyReused',
      'This Idempotency-Key was already used for a different request. Use a new key for new work.',
    );
  }
  if (isLedgerError(err, 'in_progress')) {
    const seconds = Math.max(1, Math.ceil((err.retryAfterMs ?? 1000) / 1000));
    return new ProblemError(
      'inProgress',
      'A request with this Idempotency-Key is still being processed. Retry with the same key.',
      {},
      { 'retry-after': String(seconds) },
    );
  }
  if (isLedgerError(err, 'invalid_key')) {
    return new ProblemError('invalidIdempotencyKey', 'The Idempotency-Key is not valid.');
  }
  return err;
}
