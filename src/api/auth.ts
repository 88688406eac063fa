/**
 * API keys: `sk_<env>_<random>_<tag>`, the tag an HMAC under API_KEY_SECRET, so a guess is told from
 * an issued key without I/O. Only the key's SHA-256 is stored. A request's tenant comes from its key,
 * never from a request field.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import { ProblemError } from '../http/problems.ts';

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** A key without a tag, as minted before tags: for tests of that path. New keys come from `mintApiKey`. */
export function generateApiKey(env: 'test' | 'live' = 'test'): string {
  return `sk_${env}_${randomBytes(24).toString('base64url')}`;
}

/** `sk_<env>_` + 32 random characters, then `_` + the 22-character tag: fixed lengths, so `_` inside either part is unambiguous. */
const TAGGED_KEY = /^(sk_(?:test|live)_[A-Za-z0-9_-]{32})_([A-Za-z0-9_-]{22})$/;

/** HMAC-SHA256 under API_KEY_SECRET, truncated to 128 bits; the label keeps it apart from any other use of the same secret. */
function apiKeyTag(secret: string, body: string): string {
  return createHmac('sha256', secret)
    .update(`onceflow api key v1\n${body}`, 'utf8')
    .digest()
    .subarray(0, 16)
    .toString('base64url');
}

/** A new key carrying a tag only holders of `secret` can make (`npm run api-key`). */
export function mintApiKey(secret: string, env: 'test' | 'live' = 'test'): string {
  const body = `sk_${env}_${randomBytes(24).toString('base64url')}`;
  return `${body}_${apiKeyTag(secret, body)}`;
}

/** `forged`: the tagged shape with a wrong tag; `untagged`: anything else (old keys, demo keys). */
function classifyApiKey(key: string, secret: string): 'tagged' | 'forged' | 'untagged' {
  const m = TAGGED_KEY.exec(key);
  if (!m) return 'untagged';
  const expected = Buffer.from(apiKeyTag(secret, m[1]!), 'ascii');
  const given = Buffer.from(m[2]!, 'ascii');
  return timingSafeEqual(expected, given) ? 'tagged' : 'forged';
}

/** The scheme name is case-insensitive (RFC 9110 §11.1). */
const BEARER = /^Bearer ([\x21-\x7e]{1,200})$/i;

export interface ApiKeyAuthOptions {
  /** API_KEY_SECRET: verifies key tags (see `classifyApiKey`). */
  secret: string;
  /** API_KEY_ALLOW_UNTAGGED: false refuses keys without a tag before any lookup. */
  allowUntagged: boolean;
  /** Failed lookups of untagged keys one client address may make per window before it gets 429s. */
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
 * Resolves a request's tenant from its API key, keeping guesses cheap without letting a guesser
 * lock others out:
 * - a bad tag is a 401 with no lookup, counted nowhere (per-address counting would let one client
 *   behind a NAT lock out its neighbours);
 * - untagged keys need a lookup to tell from a guess, so only they are throttled per address;
 * - only successes are cached, so a new key works at once and a revoked one stops within `cacheTtlMs`.
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

  /** Returns the tenant or throws a 401 (bad key) or 429 (too many bad untagged keys from this address) problem. */
  async authenticate(
    lookup: (keyHash: string) => Promise<string | null>,
    request: FastifyRequest,
  ): Promise<string> {
    const now = this.now();
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? BEARER.exec(header) : null;
    if (!match) throw unauthorized('Send Authorization: Bearer <api key>.');
    const key = match[1]!;
    const form = classifyApiKey(key, this.opts.secret);
    if (form === 'forged') throw unauthorized('The API key is not valid.');
    if (form === 'untagged' && !this.opts.allowUntagged) {
      throw unauthorized('The API key is not valid: keys without a tag are refused; get a new one.');
    }
    const keyHash = hashApiKey(key);
    if (this.opts.cacheTtlMs > 0) {
      const hit = this.keys.get(keyHash);
      if (hit && hit.expiresAt > now) return hit.tenantId;
      if (hit) this.keys.delete(keyHash);
    }
    const untagged = form === 'untagged';
    if (untagged) this.refuseIfThrottled(request.ip, now);
    const tenantId = await lookup(keyHash);
    if (!tenantId) {
      if (untagged) this.countFailure(request.ip, now);
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
        `Too many invalid API keys without a tag from this address; retry in ${seconds} s, or use a tagged key.`,
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

/**
 * Logs once when X-Forwarded-For comes from an untrusted peer: every client behind that proxy then
 * shares one throttle. Only knowable when such a request arrives.
 */
export function untrustedProxyWarning(log: FastifyBaseLogger): (request: FastifyRequest) => void {
  let warned = false;
  return (request) => {
    if (warned) return;
    const forwarded = request.headers['x-forwarded-for'];
    if (forwarded === undefined || String(forwarded).trim() === '') return;
    // With a trusted peer, Fastify's `ips` holds the peer and the forwarded address; otherwise the peer only.
    if ((request.ips?.length ?? 0) > 1) return;
    warned = true;
    log.warn(
      { peer: request.socket.remoteAddress },
      'Requests arrive with X-Forwarded-For from a peer not in API_TRUST_PROXY: the API treats that ' +
        "peer's address as the client of all of them, so they share one failed-key throttle " +
        '(untagged keys) and one unauthenticated rate limit. If this peer is your proxy, set ' +
        'API_TRUST_PROXY to its address. Logged once per process.',
    );
  };
}

function unauthorized(detail: string): ProblemError {
  return new ProblemError('unauthorized', detail, {}, { 'www-authenticate': 'Bearer' });
}
