/**
 * API keys. A key is `sk_<env>_<random>`; only its SHA-256 is stored, so the
 * plaintext exists only in the caller's hands (printed once by
 * `npm run api-key`). The tenant of a request comes from its key, never from
 * a request field.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ProblemError } from './problems.ts';

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export function generateApiKey(env: 'test' | 'live' = 'test'): string {
  return `sk_${env}_${randomBytes(24).toString('base64url')}`;
}

/** The scheme name is case-insensitive (RFC 9110 §11.1). */
const BEARER = /^Bearer ([\x21-\x7e]{1,200})$/i;

export interface ApiKeyAuthOptions {
  /** Failed attempts (401s) one client address may make per window before it gets 429s. */
  failureMax: number;
  failureWindowMs: number;
  /** How long a verified key is trusted without a lookup (0: always look up). Revocation waits this long. */
  cacheTtlMs: number;
  /** Bounds on the two in-memory maps, so a flood of addresses or keys can't grow them without end. */
  maxCachedKeys?: number;
  maxTrackedAddresses?: number;
  now?: () => number;
}

/**
 * Resolves the tenant of a request from its API key, and keeps guessing
 * cheap for us and slow for the guesser:
 *
 * - Every 401 counts against the client's address (fixed window). Past
 *   `failureMax`, the address gets 429 with Retry-After and no database
 *   lookup, until its window ends. Known-good keys (cached) still pass, so a
 *   tenant sharing an address with a guesser keeps working.
 * - Verified keys are cached by hash for `cacheTtlMs`, so a tenant's steady
 *   traffic costs no lookup. Only successes are cached: a miss always asks
 *   Postgres, so a key added with `npm run api-key` works at once, and a
 *   revoked key stops working within `cacheTtlMs`.
 *
 * Both maps live per process: with N API processes an address gets up to N x
 * failureMax attempts per window.
 */
export class ApiKeyAuth {
  private readonly keys = new Map<string, { tenantId: string; expiresAt: number }>();
  private readonly failures = new Map<string, { count: number; resetAt: number }>();
  private readonly now: () => number;
  private readonly maxCachedKeys: number;
  private readonly maxTrackedAddresses: number;

  constructor(private readonly opts: ApiKeyAuthOptions) {
    this.now = opts.now ?? Date.now;
    this.maxCachedKeys = opts.maxCachedKeys ?? 10_000;
    this.maxTrackedAddresses = opts.maxTrackedAddresses ?? 50_000;
  }

  /** Returns the tenant or throws a 401 (bad key) or 429 (too many bad keys from this address) problem. */
  async authenticate(
    lookup: (keyHash: string) => Promise<string | null>,
    request: FastifyRequest,
  ): Promise<string> {
    const now = this.now();
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? BEARER.exec(header) : null;
    const keyHash = match ? hashApiKey(match[1]!) : undefined;
    if (keyHash && this.opts.cacheTtlMs > 0) {
      const hit = this.keys.get(keyHash);
      if (hit && hit.expiresAt > now) return hit.tenantId;
      if (hit) this.keys.delete(keyHash);
    }
    this.refuseIfThrottled(request.ip, now);
    if (!keyHash) {
      this.countFailure(request.ip, now);
      throw unauthorized('Send Authorization: Bearer <api key>.');
    }
    const tenantId = await lookup(keyHash);
    if (!tenantId) {
      this.countFailure(request.ip, now);
      throw unauthorized('The API key is not valid.');
    }
    if (this.opts.cacheTtlMs > 0) {
      if (this.keys.size >= this.maxCachedKeys) this.keys.delete(this.keys.keys().next().value!);
      this.keys.set(keyHash, { tenantId, expiresAt: now + this.opts.cacheTtlMs });
    }
    return tenantId;
  }

  private refuseIfThrottled(address: string, now: number): void {
    const entry = this.failures.get(address);
    if (!entry) return;
    if (entry.resetAt <= now) {
      this.failures.delete(address);
      return;
    }
    if (entry.count >= this.opts.failureMax) {
      const seconds = Math.max(1, Math.ceil((entry.resetAt - now) / 1000));
      throw new ProblemError(
        'rateLimited',
        `Too many requests with a missing or invalid API key from this address; retry in ${seconds} s.`,
        {},
        { 'retry-after': String(seconds) },
      );
    }
  }

  private countFailure(address: string, now: number): void {
    const entry = this.failures.get(address);
    if (entry && entry.resetAt > now) {
      entry.count += 1;
      return;
    }
    this.failures.delete(address);
    // Oldest first: Map keeps insertion order, and every window has the same length.
    if (this.failures.size >= this.maxTrackedAddresses)
      this.failures.delete(this.failures.keys().next().value!);
    this.failures.set(address, { count: 1, resetAt: now + this.opts.failureWindowMs });
  }
}

function unauthorized(detail: string): ProblemError {
  return new ProblemError('unauthorized', detail, {}, { 'www-authenticate': 'Bearer' });
}
