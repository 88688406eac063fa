/**
 * The request pipeline shared by the sandbox's provider endpoints: the
 * Idempotency-Key contract and fault injection.
 *
 * Order of a create request:
 *   key check (400, nothing stored) -> take a fault -> fail_before (500, nothing
 *   happens) -> claim the key -> delay (while holding the claim, so concurrent
 *   requests with the same key get 409) -> effect + stored response, committed
 *   together in one statement -> fail_after (500 instead of the response) /
 *   drop_after (socket destroyed) -> response.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Pool, Queryable } from '../../src/db/index.ts';
import { errorFields, log } from '../../src/log.ts';
import { requestFingerprint } from './objects.ts';
import {
  claimKey,
  consumeFault,
  releaseKey,
  takeFaultAndClaimKey,
  type FaultEndpoint,
  type FaultKind,
  type KeyCompletion,
  type Scope,
  type StoredResponse,
} from './sql.ts';

export interface SandboxContext {
  pool: Pool;
  account: string;
  now: () => Date;
  /** How long a completed key is remembered (24 h, like Stripe). */
  keyRetentionMs: number;
  /** How long a claim is held before another request may take it over. */
  claimLeaseMs: number;
  /** Called after an effect that enqueued webhook events has committed. */
  onEventsCommitted: () => void;
}

export type ErrorType = 'invalid_request_error' | 'idempotency_error' | 'api_error' | 'card_error';

export function errorBody(type: ErrorType, message: string, extra: Record<string, unknown> = {}) {
  return { error: { type, message, ...extra } };
}

export function sendError(
  reply: FastifyReply,
  status: number,
  type: ErrorType,
  message: string,
  extra: Record<string, unknown> = {},
): FastifyReply {
  return reply
    .code(status)
    .type('application/json')
    .send(errorBody(type, message, extra));
}

const VISIBLE_ASCII = /^[\x21-\x7e]{1,255}$/;

/** The Idempotency-Key header, or an error message. Repeated headers arrive joined with ", " and fail. */
function readIdempotencyKey(req: FastifyRequest): { key: string } | { error: string } {
  const raw = req.headers['idempotency-key'];
  if (raw === undefined) return { error: 'The Idempotency-Key header is required.' };
  if (Array.isArray(raw) || !VISIBLE_ASCII.test(raw)) {
    return { error: 'The Idempotency-Key header must be 1-255 visible ASCII characters, sent once.' };
  }
  return { key: raw };
}

interface TakenFault {
  kind: FaultKind;
  delayMs: number;
}

async function takeFault(ctx: SandboxContext, endpoint: FaultEndpoint): Promise<TakenFault | null> {
  const f = await consumeFault(ctx.pool, ctx.account, endpoint);
  return f ? logFault(endpoint, f) : null;
}

function logFault(endpoint: FaultEndpoint, f: { kind: FaultKind; delay_ms: number | null }): TakenFault {
  log.info('sandbox fault injected', { endpoint, kind: f.kind, delayMs: f.delay_ms ?? undefined });
  return { kind: f.kind, delayMs: f.delay_ms ?? 0 };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** fail_before: a 500 before anything happens. Returns true if the reply was sent. */
function applyFailBefore(reply: FastifyReply, fault: TakenFault | null): boolean {
  if (fault?.kind !== 'fail_before') return false;
  reply.header('sandbox-fault', 'fail_before');
  sendError(reply, 500, 'api_error', 'Injected fault (fail_before): nothing was done.');
  return true;
}

/** Sends the response, or replaces it per fail_after / drop_after (the effect already happened). */
function finish(
  req: FastifyRequest,
  reply: FastifyReply,
  fault: TakenFault | null,
  response: StoredResponse,
  headers: Record<string, string> = {},
): FastifyReply {
  if (fault?.kind === 'drop_after') {
    // The provider acted but the caller never hears back: cut the connection.
    reply.hijack();
    req.raw.socket.destroy();
    return reply;
  }
  if (fault?.kind === 'fail_after') {
    reply.header('sandbox-fault', 'fail_after');
    return sendError(
      reply,
      500,
      'api_error',
      'Injected fault (fail_after): the request may have been processed.',
    );
  }
  for (const [k, v] of Object.entries(headers)) reply.header(k, v);
  return reply.code(response.status).type('application/json').send(response.body);
}

class LostClaimError extends Error {
  override name = 'LostClaimError';
}

/**
 * Runs `perform` at most once per (scope, key) and replays its stored response
 * for retries with the same parameters.
 */
export async function handleIdempotentCreate(
  ctx: SandboxContext,
  req: FastifyRequest,
  reply: FastifyReply,
  opts: {
    scope: Scope;
    endpoint: FaultEndpoint;
    body: unknown;
    /** Rejects a valid-looking request before anything is stored (e.g. unknown payment method). */
    precheck?: () => { status: number; message: string } | null;
    /**
     * The effect: its response, and how to commit it. `commit` writes the
     * effect together with the key's completion (one statement), and only if
     * the claim is still ours; it returns false, having written nothing, if not.
     */
    perform: (
      key: string,
      now: Date,
    ) => {
      response: StoredResponse;
      commit: (db: Queryable, completion: KeyCompletion) => Promise<boolean>;
    };
    enqueuesEvents?: boolean;
  },
): Promise<FastifyReply> {
  const k = readIdempotencyKey(req);
  if ('error' in k) return sendError(reply, 400, 'invalid_request_error', k.error);
  const key = k.key;
  const bad = opts.precheck?.();
  if (bad) return sendError(reply, bad.status, 'invalid_request_error', bad.message);

  const fingerprint = requestFingerprint(`${req.method} ${req.routeOptions.url ?? req.url}`, opts.body);
  const claimArgs = (now: Date, delayMs: number) => ({
    account: ctx.account,
    scope: opts.scope,
    key,
    fingerprint,
    token: randomUUID(),
    now,
    // The lease outlives an injected delay, so a slow request is never taken over.
    lockedUntil: new Date(now.getTime() + ctx.claimLeaseMs + delayMs),
    retentionMs: ctx.keyRetentionMs,
  });
  // The fault and the claim in one round trip (no claim under a fail_before fault).
  const first = await takeFaultAndClaimKey(ctx.pool, { ...claimArgs(ctx.now(), 0), endpoint: opts.endpoint });
  const fault = first.fault ? logFault(opts.endpoint, first.fault) : null;
  if (applyFailBefore(reply, fault)) return reply;
  const delayMs = fault?.kind === 'delay' ? fault.delayMs : 0;
  let claim = first.claim;
  // The key's row vanished between the claim and the read (released): claim again.
  for (let i = 0; i < 2 && claim === null; i++) {
    claim = await claimKey(ctx.pool, claimArgs(ctx.now(), delayMs));
  }
  if (claim === null) throw new Error('idempotency key kept changing under us');
  if (delayMs > 0) await sleep(delayMs);

  if (claim.kind !== 'claimed') {
    if (claim.fingerprint !== fingerprint) {
      return sendError(
        reply,
        400,
        'idempotency_error',
        'Keys for idempotent requests can only be used with the same parameters they were first used with. ' +
          'Use a new key for a new request.',
        { code: 'idempotency_key_reused' },
      );
    }
    if (claim.kind === 'processing') {
      reply.header('retry-after', '1');
      return sendError(
        reply,
        409,
        'idempotency_error',
        'A request with this Idempotency-Key is still being processed. Retry later with the same key.',
        { code: 'idempotency_key_in_use' },
      );
    }
    return finish(req, reply, fault, claim.response, { 'idempotent-replayed': 'true' });
  }

  const token = claim.token;
  const now = ctx.now();
  const effect = opts.perform(key, now);
  const response = effect.response;
  try {
    // The effect and the key's completion commit together: both happened or neither did.
    const owned = await effect.commit(ctx.pool, {
      account: ctx.account,
      scope: opts.scope,
      key,
      token,
      response,
      now,
    });
    if (!owned) throw new LostClaimError('the idempotency claim was taken over');
  } catch (err) {
    await releaseKey(ctx.pool, { account: ctx.account, scope: opts.scope, key, token }).catch(
      () => undefined,
    );
    throw err;
  }
  if (opts.enqueuesEvents) ctx.onEventsCommitted();
  return finish(req, reply, fault, response);
}

/** Lookup endpoints: faults apply (fail_after behaves like fail_before: a lookup has no effect). */
export async function handleLookup(
  ctx: SandboxContext,
  req: FastifyRequest,
  reply: FastifyReply,
  endpoint: FaultEndpoint,
  find: () => Promise<StoredResponse>,
): Promise<FastifyReply> {
  const fault = await takeFault(ctx, endpoint);
  if (applyFailBefore(reply, fault)) return reply;
  if (fault?.kind === 'delay') await sleep(fault.delayMs);
  return finish(req, reply, fault, await find());
}

export function logServerError(req: FastifyRequest, err: unknown): void {
  log.error('sandbox request failed', { method: req.method, url: req.routeOptions.url, ...errorFields(err) });
}
