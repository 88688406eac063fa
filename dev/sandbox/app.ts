/**
 * The sandbox: one HTTP service that behaves like a payment provider's and an
 * email provider's test mode (Stripe-like idempotency, test card tokens,
 * signed webhooks), plus `/_sandbox/*` routes to inject faults, audit effects
 * and steer webhook delivery. State lives in Postgres (schema `sandbox`), so
 * it survives restarts and stays correct under concurrent requests.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { TypeBoxValidatorCompiler, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { withTransaction, type Pool, type Queryable } from '../../src/db/index.ts';
import { PROVIDER_KEY_WINDOW_MS } from '../../src/providers/contract.ts';
import { createWebhookDispatcher, type DispatcherOptions, type WebhookDispatcher } from './dispatcher.ts';
import {
  errorBody,
  handleIdempotentCreate,
  handleLookup,
  logServerError,
  sendError,
  type SandboxContext,
} from './http.ts';
import {
  chargeAudit,
  chargeObject,
  eventView,
  messageAudit,
  messageObject,
  newId,
  refundAudit,
  refundObject,
  unixSeconds,
} from './objects.ts';
import { traceHttpServer } from '../../src/tracing/index.ts';
import { registerStripeSurface, wireConstraint } from './stripe.ts';
import {
  AuditQuery,
  CreateChargeBody,
  CreateFaultBody,
  CreateMessageBody,
  CreateRefundBody,
  LookupQuery,
  RedeliverBody,
  WebhookConfigBody,
  WebhookListQuery,
} from './schemas.ts';
import {
  deleteFaults,
  findChargeByKey,
  findMessageByKey,
  getWebhookConfig,
  commitCharge,
  commitMessage,
  commitRefund,
  commitRefusal,
  findChargeForRefund,
  findRefundByKey,
  listRefunds,
  insertFault,
  listCharges,
  listFaults,
  listMessages,
  listWebhookEvents,
  resetAccount,
  updateWebhookConfig,
  type ChargeRow,
  type FaultRow,
  type KeyCompletion,
  type MessageRow,
  type RefundRow,
} from './sql.ts';

/** The sandbox keeps idempotency keys exactly as long as the product assumes a provider does. */
const KEY_RETENTION_MS = PROVIDER_KEY_WINDOW_MS;

/** Test payment methods, named like Stripe's test tokens. A Map, so '__proto__' or 'toString' aren't "known". */
const TEST_PAYMENT_METHODS: ReadonlyMap<string, { declineCode?: string }> = new Map<
  string,
  { declineCode?: string }
>([
  ['pm_card_visa', {}],
  ['pm_card_mastercard', {}],
  ['pm_card_amex', {}],
  ['pm_card_chargeDeclined', { declineCode: 'generic_decline' }],
  ['pm_card_chargeDeclinedInsufficientFunds', { declineCode: 'insufficient_funds' }],
]);

export interface SandboxDeps {
  pool: Pool;
  /** Default delivery target (overridable at runtime via /_sandbox/webhooks/config) and signing secret. */
  webhook: { url: string | undefined; secret: string };
  now?: () => Date;
  /** Isolates this instance's state (faults, keys, audit, webhooks). Default 'default'. */
  account?: string;
  dispatcher?: Partial<DispatcherOptions>;
  /** Default 24 h. */
  keyRetentionMs?: number;
  /** Default 60 s. */
  claimLeaseMs?: number;
  /** How far the Stripe surface's search index lags behind writes (dev/sandbox/stripe.ts). Default 0. */
  stripeSearchLagMs?: number;
}

export type SandboxApp = FastifyInstance<
  Server,
  IncomingMessage,
  ServerResponse,
  FastifyBaseLogger,
  TypeBoxTypeProvider
> & {
  /** The webhook outbox dispatcher. Not started by build; `app.close()` stops it. */
  webhookDispatcher: WebhookDispatcher;
};

function faultView(f: FaultRow) {
  return {
    id: Number(f.id),
    endpoint: f.endpoint,
    kind: f.kind,
    remaining: f.remaining,
    delayMs: f.delay_ms,
    created_at: f.created_at.toISOString(),
  };
}

export function buildSandboxApp(deps: SandboxDeps): SandboxApp {
  const now = deps.now ?? (() => new Date());
  const account = deps.account ?? 'default';
  const dispatcher = createWebhookDispatcher({
    pool: deps.pool,
    account,
    now,
    webhook: deps.webhook,
    ...(deps.dispatcher ? { options: deps.dispatcher } : {}),
  });
  const ctx: SandboxContext = {
    pool: deps.pool,
    account,
    now,
    keyRetentionMs: deps.keyRetentionMs ?? KEY_RETENTION_MS,
    claimLeaseMs: deps.claimLeaseMs ?? 60_000,
    onEventsCommitted: () => dispatcher.poke(),
  };

  const app = Fastify({ logger: false, forceCloseConnections: true })
    .withTypeProvider<TypeBoxTypeProvider>()
    .setValidatorCompiler(TypeBoxValidatorCompiler);
  // A server span per request when tracing is on, a child of the caller's `traceparent` (src/tracing).
  traceHttpServer(app);
  // /v1/refunds speaks both wire formats: Stripe's requests (a Bearer key) go to its routes.
  app.addConstraintStrategy(wireConstraint);

  app.setErrorHandler((err: Error & { statusCode?: number; validation?: unknown }, req, reply) => {
    if (err.validation) {
      return reply.code(400).send(errorBody('invalid_request_error', err.message));
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return reply.code(status).send(errorBody('invalid_request_error', err.message));
    }
    logServerError(req, err);
    // Never leak internals: a generic message, no stack.
    return reply.code(500).send(errorBody('api_error', 'An internal error occurred in the sandbox.'));
  });
  app.setNotFoundHandler((req, reply) =>
    sendError(reply, 404, 'invalid_request_error', `Unrecognized request URL (${req.method} ${req.url}).`),
  );
  app.addHook('onClose', async () => dispatcher.stop());

  // ------------------------------------------------------------- payments

  app.post('/v1/charges', { schema: { body: CreateChargeBody } }, (req, reply) => {
    const body = { ...req.body, metadata: req.body.metadata ?? {} };
    const pm = TEST_PAYMENT_METHODS.get(body.payment_method);
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
              message: `No such payment_method: '${body.payment_method}'. Test methods: ${[...TEST_PAYMENT_METHODS.keys()].join(', ')}.`,
            },
      perform: (key, at) => {
        const declined = pm?.declineCode !== undefined;
        const charge: ChargeRow = {
          id: newId('ch'),
          idempotency_key: key,
          amount: body.amount,
          currency: body.currency,
          status: declined ? 'failed' : 'succeeded',
          failure_code: declined ? 'card_declined' : null,
          payment_method: body.payment_method,
          description: body.description ?? null,
          receipt_email: body.receipt_email ?? null,
          metadata: body.metadata,
          created_at: at,
        };
        const object = chargeObject(charge);
        // The outbox row commits with the charge: an event exists iff the charge does.
        const event = {
          id: newId('evt'),
          type: declined ? 'charge.failed' : 'charge.succeeded',
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
              charge: charge.id,
              // Sandbox convenience, like Stripe's `error.payment_intent`: the full failed charge.
              charge_object: object,
            }),
          },
          commit,
        };
      },
    });
  });

  app.get('/v1/charges', { schema: { querystring: LookupQuery } }, (req, reply) =>
    handleLookup(ctx, req, reply, 'charges.lookup', async () => {
      const charge = await findChargeByKey(deps.pool, account, req.query.idempotency_key);
      return charge
        ? { status: 200, body: chargeObject(charge) }
        : {
            status: 404,
            body: errorBody('invalid_request_error', 'No charge was made with this idempotency key.', {
              code: 'resource_missing',
            }),
          };
    }),
  );

  // The same charges, in Stripe's PaymentIntents wire format (dev/sandbox/stripe.ts).
  registerStripeSurface(app, ctx, {
    pool: deps.pool,
    account,
    searchLagMs: deps.stripeSearchLagMs ?? 0,
    testPaymentMethods: TEST_PAYMENT_METHODS,
  });

  // ---------------------------------------------------------------- email

  app.post('/v1/messages', { schema: { body: CreateMessageBody } }, (req, reply) => {
    const body = { ...req.body, metadata: req.body.metadata ?? {} };
    return handleIdempotentCreate(ctx, req, reply, {
      scope: 'messages',
      endpoint: 'messages.create',
      body,
      perform: (key, at) => {
        const message: MessageRow = {
          id: newId('msg'),
          idempotency_key: key,
          to_address: body.to,
          subject: body.subject,
          body_text: body.text,
          metadata: body.metadata,
          created_at: at,
        };
        return {
          response: { status: 200, body: messageObject(message) },
          commit: (db: Queryable, completion: KeyCompletion) => commitMessage(db, completion, message),
        };
      },
    });
  });

  app.get('/v1/messages', { schema: { querystring: LookupQuery } }, (req, reply) =>
    handleLookup(ctx, req, reply, 'messages.lookup', async () => {
      const message = await findMessageByKey(deps.pool, account, req.query.idempotency_key);
      return message
        ? { status: 200, body: messageObject(message) }
        : {
            status: 404,
            body: errorBody('invalid_request_error', 'No message was sent with this idempotency key.', {
              code: 'resource_missing',
            }),
          };
    }),
  );

  // --------------------------------------------------------------- faults

  // Refunds of this account's charges. The charge and its refunded total are read before the
  // key is claimed, but decided on only if this request is the key's first (a retry replays
  // whatever the first one answered); a refusal is stored under the key, as Stripe stores it.
  // The check is a read-then-decide: a test double's. The product never relies on it, its own
  // limit is the conditional update of orders.refunded_amount.
  app.post('/v1/refunds', { schema: { body: CreateRefundBody } }, async (req, reply) => {
    const body = { ...req.body, metadata: req.body.metadata ?? {} };
    const charge = await findChargeForRefund(deps.pool, account, body.charge);
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
        if (!charge) return refusal(`No such charge: '${body.charge}'.`, 'resource_missing');
        if (charge.status !== 'succeeded')
          return refusal(
            `Charge ${body.charge} did not succeed; there is nothing to refund.`,
            'charge_not_refundable',
          );
        if (charge.refunded + body.amount > charge.amount) {
          return refusal(
            `Refund amount (${body.amount}) is greater than the unrefunded amount on charge (${charge.amount - charge.refunded}).`,
            'amount_too_large',
          );
        }
        const refund: RefundRow = {
          id: newId('re'),
          idempotency_key: key,
          charge_id: body.charge,
          amount: body.amount,
          currency: charge.currency,
          status: 'succeeded',
          reason: body.reason ?? null,
          metadata: body.metadata,
          created_at: at,
        };
        const object = refundObject(refund);
        // The outbox row commits with the refund: an event exists iff the refund does.
        const event = { id: newId('evt'), type: `refund.${refund.status}`, object };
        return {
          response: { status: 200, body: object },
          commit: (db: Queryable, completion: KeyCompletion) => commitRefund(db, completion, refund, event),
        };
      },
    });
  });

  app.get('/v1/refunds', { schema: { querystring: LookupQuery } }, (req, reply) =>
    handleLookup(ctx, req, reply, 'refunds.lookup', async () => {
      const refund = await findRefundByKey(deps.pool, account, req.query.idempotency_key);
      return refund
        ? { status: 200, body: refundObject(refund) }
        : {
            status: 404,
            body: errorBody('invalid_request_error', 'No refund was made with this idempotency key.', {
              code: 'resource_missing',
            }),
          };
    }),
  );

  app.get('/_sandbox/refunds', { schema: { querystring: AuditQuery } }, async (req) => {
    const rows = await listRefunds(deps.pool, account, {
      orderId: req.query.order_id,
      tenantId: req.query.tenant_id,
      idempotencyKey: req.query.idempotency_key,
    });
    return { data: rows.map(refundAudit) };
  });

  app.post('/_sandbox/faults', { schema: { body: CreateFaultBody } }, async (req, reply) => {
    const { endpoint, kind, count = 1, delayMs } = req.body;
    if (kind === 'delay' && delayMs === undefined) {
      return sendError(reply, 400, 'invalid_request_error', 'A delay fault needs delayMs.');
    }
    const fault = await insertFault(deps.pool, account, {
      endpoint,
      kind,
      count,
      delayMs: kind === 'delay' ? (delayMs ?? 0) : null,
    });
    return reply.code(201).send(faultView(fault));
  });
  app.get('/_sandbox/faults', async () => ({
    data: (await listFaults(deps.pool, account)).map(faultView),
  }));
  app.delete('/_sandbox/faults', async () => ({ deleted: await deleteFaults(deps.pool, account) }));

  // ---------------------------------------------------------------- audit

  app.get('/_sandbox/charges', { schema: { querystring: AuditQuery } }, async (req) => {
    const rows = await listCharges(deps.pool, account, {
      orderId: req.query.order_id,
      tenantId: req.query.tenant_id,
      idempotencyKey: req.query.idempotency_key,
    });
    return { data: rows.map(chargeAudit) };
  });
  app.get('/_sandbox/messages', { schema: { querystring: AuditQuery } }, async (req) => {
    const rows = await listMessages(deps.pool, account, {
      orderId: req.query.order_id,
      tenantId: req.query.tenant_id,
      idempotencyKey: req.query.idempotency_key,
    });
    return { data: rows.map(messageAudit) };
  });

  /** Wipes this account's state: keys, charges, messages, faults, webhook config and events. */
  app.post('/_sandbox/reset', async () => {
    await withTransaction(deps.pool, (client) => resetAccount(client, account));
    return { reset: true, account };
  });

  // ------------------------------------------------------------- webhooks

  async function configView() {
    const cfg = await getWebhookConfig(deps.pool, account);
    return {
      url: cfg.url ?? deps.webhook.url ?? null,
      default_url: deps.webhook.url ?? null,
      enabled: cfg.enabled,
      duplicate: cfg.duplicate,
      reorder: cfg.reorder,
    };
  }

  app.post('/_sandbox/webhooks/config', { schema: { body: WebhookConfigBody } }, async (req) => {
    await updateWebhookConfig(deps.pool, account, req.body);
    dispatcher.poke();
    return configView();
  });
  app.get('/_sandbox/webhooks', { schema: { querystring: WebhookListQuery } }, async (req) => ({
    config: await configView(),
    data: (await listWebhookEvents(deps.pool, account, req.query.state)).map(eventView),
  }));
  app.post('/_sandbox/webhooks/redeliver', { schema: { body: RedeliverBody } }, async (req, reply) => {
    const result = await dispatcher.redeliver(req.body.eventId);
    if (!result)
      return sendError(reply, 404, 'invalid_request_error', `No such event: '${req.body.eventId}'.`);
    return result;
  });

  // Readiness: answers only when Postgres does.
  const health = async () => {
    await deps.pool.query('select 1');
    return { ok: true, account, time: unixSeconds(now()) };
  };
  app.get('/healthz', health);
  app.get('/_sandbox/health', health);

  return Object.assign(app, { webhookDispatcher: dispatcher }) as SandboxApp;
}
