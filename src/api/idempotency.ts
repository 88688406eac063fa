/**
 * The idempotency layer of the API: the Idempotency-Key header, read as the
 * IETF draft and DOMAIN.md require, and the one transaction an idempotent
 * request's writes run in (idempotentTransaction).
 *
 * The header: read as the IETF draft and DOMAIN.md require.
 * Node joins repeated custom headers with ", " in `request.headers`, so a
 * repeated header is detected on the raw header list instead.
 *
 * The draft defines the field as a Structured Field String (RFC 8941
 * §3.3.3), `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`, while
 * most clients (Stripe's among them) send the bare value. Both are accepted
 * and name the SAME key: a value that starts with `"` is decoded as an
 * sf-string (quotes removed, `\\` and `\"` unescaped) before the usual checks,
 * so `"abc"` and `abc` replay each other. A value that starts with `"` but is
 * not a well-formed sf-string (no closing quote, a bad escape, parameters or
 * anything after the closing quote) is a 400, never guessed at.
 */
import type { FastifyRequest } from 'fastify';
import type { PoolClient } from '../db/index.ts';
import { ProblemError } from '../http/problems.ts';
import { isLedgerError, type Json, type Ledger, type Scope } from 'onceflow';
import { idempotentLedgerInput, type IdempotentRequest } from '../recovery/memo.ts';
import { RECOVERY_RETRY_AFTER_SECONDS, type RecoveryGate } from '../recovery/gate.ts';

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
 * Refuses a create while a recovery after a database restore is pending
 * (src/recovery/gate.ts): 503 with Retry-After, nothing stored, so a client
 * that retries under the same key gets its original answer once the
 * recovery has rebuilt it. A key whose record the database has (a create
 * from before the backup, or one the recovery already rebuilt) is a replay,
 * not new work: it goes through. Called by every create before its
 * transaction; the record is read only while the gate is closed.
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
 * Runs `body` once per key, in the ledger's local mode: one transaction holds
 * the idempotency record (claimed before `body` runs, completed with the
 * response `body` returns), and every write `body` makes through `tx`. They
 * commit together or not at all, so a crash leaves neither the record nor
 * the writes, and a retry runs normally.
 *
 * - The same key and request again: the stored response, `replayed: true`,
 *   `body` not called.
 * - The same key with another request (body or endpoint): 422 keyReused.
 * - The first request still in its transaction: 409 inProgress with
 *   Retry-After (after the ledger's short bounded wait for it).
 * - `body` throws: rolled back, nothing stored (a server error is never
 *   stored as final); the error is rethrown.
 */
export async function idempotentTransaction<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  request: IdempotentRequest,
  body: (tx: PoolClient) => Promise<T>,
): Promise<{ result: T; replayed: boolean }> {
  try {
    return await ledger.runLocal<T>(scope, idempotentLedgerInput(request), body);
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
