/**
 * The Idempotency-Key header, read as the IETF draft and DOMAIN.md require.
 * Node joins repeated custom headers with ", " in `request.headers`, so a
 * repeated header is detected on the raw header list instead.
 */
import type { FastifyRequest } from 'fastify';
import { ProblemError } from './problems.ts';

export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
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
  const key = values[0]!;
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
