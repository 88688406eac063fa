/**
 * The sandbox's Stripe surface: the subset of Stripe's PaymentIntents API the
 * Stripe adapter (src/providers/stripe.ts) uses, in Stripe's wire format, so
 * the same fault plans test either adapter.
 *
 *   POST /v1/payment_intents          form-encoded, confirm=true only; Idempotency-Key
 *                                     required; 200 the PaymentIntent, 402 card_error
 *                                     with error.payment_intent on a decline
 *   GET  /v1/payment_intents/:id      the PaymentIntent, or 404 resource_missing
 *   GET  /v1/payment_intents/search   query=metadata['k']:'v'; the index lags by
 *                                     `searchLagMs` (a charge younger than that is not found)
 *   POST /v1/refunds                  form-encoded, payment_intent + amount (+ metadata);
 *                                     Idempotency-Key required; 200 the refund, 400 when
 *                                     there is nothing (or not enough) left to refund
 *   GET  /v1/refunds?payment_intent=  the PaymentIntent's refunds, newest first, paginated
 *                                     (limit, starting_after); lags like search
 *
 * - Auth: `Authorization: Bearer sk_test_…` (or rk_test_); anything else 401,
 *   a live key included.
 * - Idempotency: the charges surface's (handleIdempotentCreate, scope
 *   `charges`): same key + same parameters replays with
 *   Idempotent-Replayed, other parameters 400 idempotency_error, still
 *   processing 409, keys forgotten after the key window (keyRetentionMs).
 * - Effects are rows of sandbox.charges (ids `pi_…`), so /_sandbox/charges lists
 *   them with the /v1/charges ones, and the fault endpoints `charges.create` /
 *   `charges.lookup` apply to both surfaces. No new tables.
 * - Refunds are rows of sandbox.refunds (scope `refunds`, faults
 *   `refunds.create` / `refunds.lookup`, audit /_sandbox/refunds), as the
 *   JSON surface's are. `/v1/refunds` serves both wire formats: a request
 *   with a Bearer key is Stripe's (the `wire` route constraint below).
 * - Events `payment_intent.succeeded` / `payment_intent.payment_failed` and
 *   `refund.created` (Stripe's event for a new refund) go through the same outbox; the dispatcher signs every delivery with both
 *   `Onceflow-Signature` and `Stripe-Signature` (the same scheme).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Pool, Queryable } from '../../src/db/index.ts';
import { errorBody, handleIdempotentCreate, handleLookup, sendError, type SandboxContext } from './http.ts';
import { newId, unixSeconds } from './objects.ts';
import {
  commitCharge,
  commitRefund,
  commitRefusal,
  findChargeForRefund,
  listRefundsOfCharge,
  type ChargeRow,
  type KeyCompletion,
  type RefundRow,
} from './sql.ts';

export interface StripeSurfaceOptions {
  pool: Pool;
  account: string;
  /** How far the search index lags behind writes. */
  searchLagMs: number;
  testPaymentMethods: ReadonlyMap<string, { declineCode?: string }>;
}

/** Stripe's form encoding, with `a[b]=v` nesting and `a[0]=v` arrays (what stripe-node sends). */
export function parseStripeForm(body: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of new URLSearchParams(body)) {
    const parts = name.split(/\[|\]\[|\]/).filter((p, i) => i === 0 || p !== '');
    let node: Record<string, unknown> = out;
    for (let i = 0; i < parts.length - 1; i++) {
      const part = parts[i]!;
      const next = node[part];
      if (typeof next !== 'object' || next === null)
        node[part] = Object.create(null) as Record<string, unknown>;
      node = node[part] as Record<string, unknown>;
    }
    node[parts[parts.length - 1]!] = value;
  }
  return out;
}

const PI_COLUMNS = `id, idempotency_key, amount, currency, status, failure_code, payment_method,
  description, receipt_email, metadata, created_at`;

function paymentIntentObject(c: ChargeRow, declineCode: string | undefined) {
  const succeeded = c.status === 'succeeded';
  return {
    id: c.id,
    object: 'payment_intent' as const,
    amount: c.amount,
    amount_received: succeeded ? c.amount : 0,
    currency: c.currency,
    status: succeeded ? 'succeeded' : 'requires_payment_method',
    capture_method: 'automatic',
    confirmation_method: 'automatic',
    payment_method: c.payment_method,
    payment_method_types: ['card'],
    description: c.description,
    receipt_email: c.receipt_email,
    metadata: c.metadata,
    last_payment_error: succeeded
      ? null
      : {
          type: 'card_error',
          code: c.failure_code ?? 'card_declined',
          decline_code: declineCode ?? 'generic_decline',
          message: 'Your card was declined.',
        },
    livemode: false,
    created: unixSeconds(c.created_at),
  };
}

/** Stripe's search syntax, only the form the adapter sends: metadata['key']:'value' (with \' and \\ escapes). */
export function parseMetadataQuery(query: string): { key: string; value: string } | null {
  const m = /^\s*metadata\['([A-Za-z0-9_-]{1,40})'\]\s*:\s*'((?:[^'\\]|\\.)*)'\s*$/.exec(query);
  if (!m) return null;
  return { key: m[1]!, value: m[2]!.replace(/\\(.)/g, '$1') };
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

type Validated =
  | { ok: true; body: Record<string, unknown> & { amount: number; currency: string; payment_method: string } }
  | { ok: false; message: string };

function validateCreate(form: Record<string, unknown>): Validated {
  const amount = Number(str(form.amount));
  if (!Number.isInteger(amount) || amount < 1 || amount > 99_999_999) {
    return { ok: false, message: 'amount must be an integer number of minor units, 1..99999999' };
  }
  const currency = str(form.currency);
  if (!currency || !/^[a-z]{3}$/.test(currency))
    return { ok: false, message: 'currency must be 3 lowercase letters' };
  const pm = str(form.payment_method);
  if (!pm) return { ok: false, message: 'payment_method is required' };
  if (str(form.confirm) !== 'true') {
    return { ok: false, message: 'the sandbox only creates PaymentIntents with confirm=true' };
  }
  const metadata = metadataOf(form.metadata);
  if (!metadata) {
    return { ok: false, message: 'metadata is a map; keys are at most 40 characters, values at most 500' };
  }
  const body: Validated & { ok: true } = {
    ok: true,
    body: { amount, currency, payment_method: pm, confirm: true, metadata },
  };
  const description = str(form.description);
  if (description !== undefined) body.body.description = description;
  const receiptEmail = str(form.receipt_email);
  if (receiptEmail !== undefined) body.body.receipt_email = receiptEmail;
  if (form.automatic_payment_methods !== undefined) {
    body.body.automatic_payment_methods = form.automatic_payment_methods;
  }
  return body;
}

/** A refund in Stripe's wire format (the fields the adapter reads, and Stripe's nulls for the rest). */
function stripeRefundObject(r: RefundRow) {
  return {
    id: r.id,
    object: 'refund' as const,
    amount: r.amount,
    balance_transaction: null,
    charge: null,
    created: unixSeconds(r.created_at),
    currency: r.currency,
    metadata: r.metadata,
    payment_intent: r.charge_id,
    reason: null,
    receipt_number: null,
    source_transfer_reversal: null,
    status: r.status,
    transfer_reversal: null,
  };
}

type ValidatedRefund =
  | { ok: true; body: { payment_intent: string; amount: number; metadata: Record<string, string> } }
  | { ok: false; message: string };

function validateRefund(form: Record<string, unknown>): ValidatedRefund {
  const pi = str(form.payment_intent);
  if (!pi) return { ok: false, message: 'the sandbox refunds by payment_intent only' };
  const amount = Number(str(form.amount));
  if (!Number.isInteger(amount) || amount < 1 || amount > 99_999_999) {
    return { ok: false, message: 'amount must be an integer number of minor units, 1..99999999' };
  }
  const metadata = metadataOf(form.metadata);
  if (!metadata) {
    return { ok: false, message: 'metadata is a map; keys are at most 40 characters, values at most 500' };
  }
  return { ok: true, body: { payment_intent: pi, amount, metadata } };
}

function metadataOf(raw: unknown): Record<string, string> | null {
  const metadata: Record<string, string> = {};
  if (raw === undefined) return metadata;
  if (typeof raw !== 'object' || raw === null) return null;
  for (const [k, v] of Object.entries(raw)) {
    if (typeof v !== 'string' || k.length > 40 || v.length > 500) return null;
    metadata[k] = v;
  }
  return metadata;
}

/**
 * Which wire format a request speaks: Stripe's carries a Bearer API key, the
 * sandbox's JSON API none. Routes with `constraints: { wire: 'stripe' }` take
 * Stripe's requests; an unconstrained route of the same path takes the rest.
 */
type ConstraintStrategy = Parameters<FastifyInstance['addConstraintStrategy']>[0];
type RouteHandler = NonNullable<ReturnType<ReturnType<ConstraintStrategy['storage']>['get']>>;

export const wireConstraint: ConstraintStrategy = {
  name: 'wire',
  storage() {
    const handlers = new Map<unknown, RouteHandler>();
    return {
      get: (value) => handlers.get(value) ?? null,
      set: (value, handler) => void handlers.set(value, handler),
    };
  },
  deriveConstraint: (req) => {
    const auth = req.headers.authorization;
    return typeof auth === 'string' && auth.startsWith('Bearer ') ? 'stripe' : undefined;
  },
  mustMatchWhenDerived: false,
};

function authorized(req: FastifyRequest, reply: FastifyReply): boolean {
  const auth = req.headers.authorization ?? '';
  if (/^Bearer (sk|rk)_test_[A-Za-z0-9_]+$/.test(auth)) return true;
  void sendError(
    reply,
    401,
    'invalid_request_error',
    'Invalid API Key provided: the sandbox accepts test keys only (sk_test_...).',
  );
  return false;
}

export function registerStripeSurface(
  app: FastifyInstance,
  ctx: SandboxContext,
  opts: StripeSurfaceOptions,
): void {
  const declineOf = (pm: string) => opts.testPaymentMethods.get(pm)?.declineCode;
  const view = (c: ChargeRow) => paymentIntentObject(c, declineOf(c.payment_method));

  app.register(async (scope) => {
    // Stripe's requests are form-encoded; only this surface parses them.
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: 64 * 1024 },
      (_req, body, done) => done(null, parseStripeForm(body as string)),
    );

    scope.post('/v1/payment_intents', (req, reply) => {
      if (!authorized(req, reply)) return reply;
      const v = validateCreate((req.body ?? {}) as Record<string, unknown>);
      if (!v.ok) return sendError(reply, 400, 'invalid_request_error', v.message);
      const body = v.body;
      const pm = opts.testPaymentMethods.get(body.payment_method);
      return handleIdempotentCreate(ctx, req, reply, {
        scope: 'charges',
        endpoint: 'charges.create',
        body,
        enqueuesEvents: true,
        precheck: () =>
          pm
            ? null
            : {
                status: 400,
                message: `No such PaymentMethod: '${body.payment_method}'. Test methods: ${[...opts.testPaymentMethods.keys()].join(', ')}.`,
              },
        perform: (key, at) => {
          const declined = pm?.declineCode !== undefined;
          const charge: ChargeRow = {
            id: newId('pi'),
            idempotency_key: key,
            amount: body.amount,
            currency: body.currency,
            status: declined ? 'failed' : 'succeeded',
            failure_code: declined ? 'card_declined' : null,
            payment_method: body.payment_method,
            description: str(body.description) ?? null,
            receipt_email: str(body.receipt_email) ?? null,
            metadata: body.metadata as Record<string, string>,
            created_at: at,
          };
          const object = view(charge);
          const event = {
            id: newId('evt'),
            type: declined ? 'payment_intent.payment_failed' : 'payment_intent.succeeded',
            object,
          };
          const commit = (db: Queryable, completion: KeyCompletion) =>
            commitCharge(db, completion, charge, event);
          if (!declined) return { response: { status: 200, body: object }, commit };
          return {
            response: {
              status: 402,
              body: errorBody('card_error', 'Your card was declined.', {
                code: 'card_declined',
                decline_code: pm?.declineCode,
                payment_intent: object,
              }),
            },
            commit,
          };
        },
      });
    });

    // A refund of one of this account's PaymentIntents. As on the JSON surface, the charge and its
    // refunded total are read before the key is claimed and decided on only by the key's first
    // request; a refusal is stored under the key (Stripe stores a 400 its handler produced).
    scope.post('/v1/refunds', { constraints: { wire: 'stripe' } }, async (req, reply) => {
      if (!authorized(req, reply)) return reply;
      const v = validateRefund((req.body ?? {}) as Record<string, unknown>);
      if (!v.ok) return sendError(reply, 400, 'invalid_request_error', v.message);
      const body = v.body;
      const charge = body.payment_intent.startsWith('pi_')
        ? await findChargeForRefund(opts.pool, opts.account, body.payment_intent)
        : null;
      const refusal = (message: string, code: string) => ({
        response: { status: 400, body: errorBody('invalid_request_error', message, { code }) },
        commit: (db: Queryable, completion: KeyCompletion) => commitRefusal(db, completion),
      });
      return handleIdempotentCreate(ctx, req, reply, {
        scope: 'refunds',
        endpoint: 'refunds.create',
        body,
        enqueuesEvents: true,
        perform: (key, at) => {
          if (!charge) return refusal(`No such payment_intent: '${body.payment_intent}'`, 'resource_missing');
          if (charge.status !== 'succeeded') {
            return refusal(
              `PaymentIntent ${body.payment_intent} does not have a successful charge to refund.`,
              'charge_not_refundable',
            );
          }
          if (charge.refunded + body.amount > charge.amount) {
            return refusal(
              `Refund amount (${body.amount}) is greater than the unrefunded amount (${charge.amount - charge.refunded}).`,
              'amount_too_large',
            );
          }
          const refund: RefundRow = {
            id: newId('re'),
            idempotency_key: key,
            charge_id: body.payment_intent,
            amount: body.amount,
            currency: charge.currency,
            status: 'succeeded',
            reason: null,
            metadata: body.metadata,
            created_at: at,
          };
          const object = stripeRefundObject(refund);
          const event = { id: newId('evt'), type: 'refund.created', object };
          return {
            response: { status: 200, body: object },
            commit: (db: Queryable, completion: KeyCompletion) => commitRefund(db, completion, refund, event),
          };
        },
      });
    });

    scope.get('/v1/refunds', { constraints: { wire: 'stripe' } }, (req, reply) => {
      if (!authorized(req, reply)) return reply;
      const q = (req.query ?? {}) as Record<string, unknown>;
      const pi = str(q.payment_intent);
      if (!pi) {
        return sendError(
          reply,
          400,
          'invalid_request_error',
          'The sandbox lists refunds by payment_intent only.',
        );
      }
      const limit = Math.min(100, Math.max(1, Number(str(q.limit) ?? 10) || 10));
      const startingAfter = str(q.starting_after);
      return handleLookup(ctx, req, reply, 'refunds.lookup', async () => {
        // Listed like search: a refund younger than the lag is not visible yet (the adapter
        // declares the listing lagging, so the sandbox lets tests hold it to that).
        const visibleBefore = new Date(ctx.now().getTime() - opts.searchLagMs);
        const rows = await listRefundsOfCharge(opts.pool, opts.account, {
          chargeId: pi,
          visibleBefore,
          startingAfter,
          limit,
        });
        return {
          status: 200,
          body: {
            object: 'list',
            url: '/v1/refunds',
            has_more: rows.length > limit,
            data: rows.slice(0, limit).map(stripeRefundObject),
          },
        };
      });
    });

    // Registered before /:id, which would otherwise take "search" as an id.
    scope.get('/v1/payment_intents/search', (req, reply) => {
      if (!authorized(req, reply)) return reply;
      const q = (req.query ?? {}) as Record<string, unknown>;
      const parsed = parseMetadataQuery(str(q.query) ?? '');
      if (!parsed) {
        return sendError(
          reply,
          400,
          'invalid_request_error',
          "The sandbox's search supports one clause: metadata['key']:'value'.",
        );
      }
      const limit = Math.min(100, Math.max(1, Number(str(q.limit) ?? 10) || 10));
      return handleLookup(ctx, req, reply, 'charges.lookup', async () => {
        // The index lags: a charge younger than searchLagMs is not found yet.
        const visibleBefore = new Date(ctx.now().getTime() - opts.searchLagMs);
        const { rows } = await opts.pool.query<ChargeRow>(
          `select ${PI_COLUMNS} from sandbox.charges
            where account = $1 and id like 'pi\\_%' and metadata ->> $2 = $3 and created_at <= $4
            order by created_at desc, id desc limit $5`,
          [opts.account, parsed.key, parsed.value, visibleBefore, limit],
        );
        return {
          status: 200,
          body: {
            object: 'search_result',
            url: '/v1/payment_intents/search',
            has_more: false,
            next_page: null,
            data: rows.map(view),
          },
        };
      });
    });

    scope.get('/v1/payment_intents/:id', (req, reply) => {
      if (!authorized(req, reply)) return reply;
      const id = (req.params as { id: string }).id;
      return handleLookup(ctx, req, reply, 'charges.lookup', async () => {
        const { rows } = await opts.pool.query<ChargeRow>(
          `select ${PI_COLUMNS} from sandbox.charges where account = $1 and id = $2`,
          [opts.account, id],
        );
        const row = rows[0];
        return row
          ? { status: 200, body: view(row) }
          : {
              status: 404,
              body: errorBody('invalid_request_error', `No such payment_intent: '${id}'`, {
                code: 'resource_missing',
              }),
            };
      });
    });
  });
}
