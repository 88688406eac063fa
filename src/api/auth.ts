/**
 * API keys. A key is `sk_<env>_<random>`; only its SHA-256 is stored, so the
 * plaintext exists only in the caller's hands (printed once by
 * `npm run api-key`). The tenant of a request comes from its key, never from
 * a request field.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Queryable } from '../db/index.ts';
import { ProblemError } from './problems.ts';
import { findTenantByKeyHash } from './sql.ts';

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export function generateApiKey(env: 'test' | 'live' = 'test'): string {
  return `sk_${env}_${randomBytes(24).toString('base64url')}`;
}

/** The scheme name is case-insensitive (RFC 9110 §11.1). */
const BEARER = /^Bearer ([\x21-\x7e]{1,200})$/i;

/** Resolves the tenant for a request or throws a 401 problem. */
export async function authenticate(db: Queryable, request: FastifyRequest): Promise<string> {
  const header = request.headers.authorization;
  const match = typeof header === 'string' ? BEARER.exec(header) : null;
  if (!match) {
    throw new ProblemError(
      'unauthorized',
      'Send Authorization: Bearer <api key>.',
      {},
      {
        'www-authenticate': 'Bearer',
      },
    );
  }
  const tenantId = await findTenantByKeyHash(db, hashApiKey(match[1]!));
  if (!tenantId) {
    throw new ProblemError('unauthorized', 'The API key is not valid.', {}, { 'www-authenticate': 'Bearer' });
  }
  return tenantId;
}
