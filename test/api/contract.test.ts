/**
 * Contract test: real requests to the real API (buildApiServer, as
 * src/api/main.ts serves it, on a real port, with real Postgres and the
 * Temporal dev server), and every real response checked against the
 * document the same server serves at /openapi.json: the status is documented
 * for that operation, the body matches the schema for its media type (Ajv,
 * JSON Schema 2020-12 as OpenAPI 3.1 uses), headers documented as required
 * are there, and every header the document describes that is sent matches
 * its schema (and is documented on that response).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { normalizeCreateOrder } from '../../src/api/routes/orders.ts';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import { Ledger } from 'onceflow';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { testPool, temporalClient, uniq } from '../support/env.ts';
import { PROBLEM, call, newTenant, testConfig, validOrder, type Res } from './support.ts';
import { deferred } from '../support/wait.ts';

type Obj = Record<string, unknown>;
interface DocResponse {
  headers?: Record<string, { required?: boolean; schema: Obj }>;
  content?: Record<string, { schema: Obj }>;
}
interface Doc {
  paths: Record<string, Record<string, { responses: Record<string, DocResponse> }>>;
  components: { schemas: Record<string, Obj> };
}

const ADMIN = 'admin_contract_token_0123456789';
const RATE_LIMIT = 6;
const WEBHOOK_SECRET = 'whsec_contract_test';
/** Headers that, when sent, must be documented on that response. */
const CONTRACT_HEADERS = [
  'location',
  'idempotent-replayed',
  'preference-applied',
  'retry-after',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
];

let app: FastifyInstance;
let pool: Pool;
let ledger: Ledger;
let url: string;
let closeClient: () => Promise<void>;
let doc: Doc;
let ajv: Ajv2020;
const checked = new Set<string>();

beforeAll(async () => {
  const config = testConfig({
    ONCEFLOW_ADMIN_TOKEN: ADMIN,
    WEBHOOK_SECRET,
    API_RATE_LIMIT_MAX: String(RATE_LIMIT),
    OUTBOX_RELAY: 'off',
  });
  pool = testPool(10, config.databaseUrl);
  ledger = new Ledger(pool, { localWaitMs: 300 });
  const tc = await temporalClient();
  closeClient = tc.close;
  app = await buildApiServer({ pool, ledger, temporal: tc.client, config });
  const port = await freePort();
  await app.listen({ host: '127.0.0.1', port });
  url = `http://127.0.0.1:${port}`;

  const res = await fetch(`${url}/openapi.json`);
  expect(res.status).toBe(200);
  doc = (await res.json()) as Doc;
  ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  // The components as one schema resource; operation schemas point into it.
  ajv.addSchema(
    JSON.parse(
      JSON.stringify({ $id: 'onceflow', $defs: doc.components.schemas }).replaceAll(
        '#/components/schemas/',
        '#/$defs/',
      ),
    ) as Obj,
  );
});

afterAll(async () => {
  await app?.close();
  await closeClient?.();
  await pool?.end();
});

function validate(schema: Obj, value: unknown, what: string) {
  const resolved = JSON.parse(
    JSON.stringify(schema).replaceAll('#/components/schemas/', 'onceflow#/$defs/'),
  ) as Obj;
  const check = ajv.compile(resolved);
  const ok = check(value);
  expect(ok ? [] : check.errors, `${what}: ${JSON.stringify(value)}`).toEqual([]);
}

/** A header's text as its schema's type (headers arrive as text). */
function headerValue(schema: Obj, text: string): unknown {
  return schema.type === 'integer' && /^\d+$/.test(text) ? Number(text) : text;
}

/** Checks one real response against the document's operation `method pathTemplate`. */
function conforms(method: string, pathTemplate: string, res: Res): void {
  const what = `${method} ${pathTemplate} -> ${res.status}`;
  const op = doc.paths[pathTemplate]?.[method.toLowerCase()];
  expect(op, `${method} ${pathTemplate} is documented`).toBeDefined();
  const documented = op!.responses[String(res.status)];
  expect(documented, `${what} is documented`).toBeDefined();

  const mediaType = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
  const media = documented!.content?.[mediaType];
  expect(media, `${what}: ${mediaType} is a documented media type`).toBeDefined();
  validate(media!.schema, res.body, `${what} body`);

  const headers = Object.fromEntries(
    Object.entries(documented!.headers ?? {}).map(([name, h]) => [name.toLowerCase(), h]),
  );
  for (const [name, h] of Object.entries(headers)) {
    const text = res.headers.get(name);
    if (h.required) expect(text, `${what}: required header ${name}`).not.toBeNull();
    if (text !== null) validate(h.schema, headerValue(h.schema, text), `${what} header ${name}`);
  }
  for (const name of CONTRACT_HEADERS) {
    if (res.headers.get(name) !== null)
      expect(headers[name], `${what}: sent header ${name} is documented`).toBeDefined();
  }
  checked.add(`${method} ${pathTemplate} ${res.status}`);
}

const admin = { authorization: `Bearer ${ADMIN}` };

describe('orders', () => {
  it('create 202 (Location), replay 202 (Idempotent-Replayed), get 200, list 200', async () => {
    const t = await newTenant(pool, 'contract');
    const idem = uniq('idem');
    const created = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(created.status).toBe(202);
    conforms('POST', '/v1/orders', created);

    const replay = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(replay.status).toBe(202);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    conforms('POST', '/v1/orders', replay);

    const id = (created.body as { id: string }).id;
    const got = await call({ url }, 'GET', `/v1/orders/${id}`, { key: t.key });
    expect(got.status).toBe(200);
    conforms('GET', '/v1/orders/{id}', got);

    const list = await call({ url }, 'GET', '/v1/orders?limit=1', { key: t.key });
    expect(list.status).toBe(200);
    expect((list.body as { data: unknown[] }).data).toHaveLength(1);
    conforms('GET', '/v1/orders', list);
  });

  it('Prefer: wait: 202 when the order is not terminal in time, 200 (a replay) once it is', async () => {
    const t = await newTenant(pool, 'contract');
    const idem = uniq('idem');
    const prefer = { prefer: 'wait=1' };
    const waited = await call({ url }, 'POST', '/v1/orders', {
      key: t.key,
      idem,
      body: validOrder(),
      headers: prefer,
    });
    expect(waited.status).toBe(202);
    expect(waited.headers.get('preference-applied')).toBe('wait=1');
    conforms('POST', '/v1/orders', waited);

    // No workflow runs here (OUTBOX_RELAY off): the order is made terminal by hand.
    const id = (waited.body as { id: string }).id;
    await pool.query(`update orders set status = 'completed' where tenant_id = $1 and id = $2`, [
      t.tenantId,
      id,
    ]);
    const done = await call({ url }, 'POST', '/v1/orders', {
      key: t.key,
      idem,
      body: validOrder(),
      headers: prefer,
    });
    expect(done.status).toBe(200);
    expect(done.headers.get('idempotent-replayed')).toBe('true');
    conforms('POST', '/v1/orders', done);
  });

  it('409 in progress (Retry-After), 422 key reused, 400 missing/malformed key and schema, 404', async () => {
    const t = await newTenant(pool, 'contract');
    const idem = uniq('idem');
    const order = validOrder();
    const held = deferred();
    const entered = deferred();
    // A first attempt held open inside its ledger transaction, as the API would run it.
    const first = ledger
      .runLocal(
        { tenantId: t.tenantId, operationType: OPERATION_TYPES.createOrder, key: idem },
        {
          schemaVersion: 1,
          value: { method: 'POST', path: '/v1/orders', body: normalizeCreateOrder(order) },
        },
        async () => {
          entered.resolve();
          await held.promise;
          throw new Error('first attempt rolled back');
        },
      )
      .catch((e: unknown) => e);
    await entered.promise;
    const busy = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: order });
    held.resolve();
    await first;
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ type: `${PROBLEM}idempotency-key-in-progress` });
    conforms('POST', '/v1/orders', busy);

    const done = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: order });
    expect(done.status).toBe(202);
    const reused = await call({ url }, 'POST', '/v1/orders', {
      key: t.key,
      idem,
      body: { ...order, currency: 'eur' },
    });
    expect(reused.status).toBe(422);
    expect(reused.body).toMatchObject({ type: `${PROBLEM}idempotency-key-reused` });
    conforms('POST', '/v1/orders', reused);

    const t2 = await newTenant(pool, 'contract');
    const missing = await call({ url }, 'POST', '/v1/orders', { key: t2.key, body: order });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key` });
    conforms('POST', '/v1/orders', missing);

    const malformed = await call({ url }, 'POST', '/v1/orders', { key: t2.key, idem: '"abc', body: order });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key` });
    conforms('POST', '/v1/orders', malformed);

    const schema = await call({ url }, 'POST', '/v1/orders', {
      key: t2.key,
      idem: uniq('idem'),
      body: { ...order, items: [] },
    });
    expect(schema.status).toBe(400);
    expect(schema.body).toMatchObject({ type: `${PROBLEM}invalid-request` });
    conforms('POST', '/v1/orders', schema);

    const notFound = await call({ url }, 'GET', '/v1/orders/ord_nope', { key: t2.key });
    expect(notFound.status).toBe(404);
    conforms('GET', '/v1/orders/{id}', notFound);
  });

  it('401 without a valid API key', async () => {
    const res = await call({ url }, 'POST', '/v1/orders', {
      key: 'sk_test_nope',
      idem: uniq('idem'),
      body: validOrder(),
    });
    expect(res.status).toBe(401);
    conforms('POST', '/v1/orders', res);
    const list = await call({ url }, 'GET', '/v1/orders');
    expect(list.status).toBe(401);
    conforms('GET', '/v1/orders', list);
  });

  it('429 past the per-tenant limit (Retry-After and the rate-limit headers)', async () => {
    const t = await newTenant(pool, 'contract');
    let last: Res | undefined;
    for (let i = 0; i <= RATE_LIMIT; i++) {
      last = await call({ url }, 'POST', '/v1/orders', {
        key: t.key,
        idem: uniq('idem'),
        body: validOrder(),
      });
      if (i < RATE_LIMIT) {
        expect(last.status).toBe(202);
        expect(last.headers.get('x-ratelimit-remaining')).toBe(String(RATE_LIMIT - i - 1));
      }
    }
    expect(last!.status).toBe(429);
    expect(last!.body).toMatchObject({ type: `${PROBLEM}rate-limited` });
    conforms('POST', '/v1/orders', last!);
  });
});

describe('webhook, health, admin', () => {
  it('webhook 200 for a signed event, 401 for a bad signature', async () => {
    const raw = JSON.stringify({
      id: uniq('evt'),
      type: 'charge.succeeded',
      data: { object: { id: uniq('ch'), status: 'succeeded', metadata: {} } },
    });
    const ok = await call({ url }, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: { 'onceflow-signature': signWebhook(WEBHOOK_SECRET, raw, Math.floor(Date.now() / 1000)) },
    });
    expect(ok.status).toBe(200);
    conforms('POST', '/v1/webhooks/payments', ok);
    const bad = await call({ url }, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: { 'onceflow-signature': signWebhook('whsec_wrong', raw, Math.floor(Date.now() / 1000)) },
    });
    expect(bad.status).toBe(401);
    conforms('POST', '/v1/webhooks/payments', bad);
  });

  it('healthz and readyz 200', async () => {
    conforms('GET', '/healthz', await call({ url }, 'GET', '/healthz'));
    const ready = await call({ url }, 'GET', '/readyz');
    expect(ready.status).toBe(200);
    conforms('GET', '/readyz', ready);
  });

  it('admin routes: 200 with the admin token, 401 without, 404 for an unknown operation', async () => {
    const t = await newTenant(pool, 'contract');
    const idem = uniq('idem');
    const created = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(created.status).toBe(202);

    const denied = await call({ url }, 'GET', '/admin/attention', { key: 'sk_test_acme_local' });
    expect(denied.status).toBe(401);
    conforms('GET', '/admin/attention', denied);

    const ops = await call({ url }, 'GET', `/admin/operations?tenant=${t.tenantId}&state=succeeded`, {
      headers: admin,
    });
    expect(ops.status).toBe(200);
    expect((ops.body as { data: unknown[] }).data.length).toBeGreaterThan(0);
    conforms('GET', '/admin/operations', ops);

    const q = new URLSearchParams({ tenant: t.tenantId, type: OPERATION_TYPES.createOrder, key: idem });
    const story = await call({ url }, 'GET', `/admin/operation?${q}`, { headers: admin });
    expect(story.status).toBe(200);
    conforms('GET', '/admin/operation', story);

    const attention = await call({ url }, 'GET', `/admin/attention?tenant=${t.tenantId}`, { headers: admin });
    expect(attention.status).toBe(200);
    conforms('GET', '/admin/attention', attention);

    const reconcile = await call({ url }, 'POST', '/admin/operations/reconcile', {
      headers: admin,
      body: { tenant: t.tenantId, type: 'payment.charge', key: uniq('nope'), actor: 'contract test' },
    });
    expect(reconcile.status).toBe(404);
    conforms('POST', '/admin/operations/reconcile', reconcile);
  });
});

afterAll(() => {
  // Guards against the checks above silently not running.
  expect(checked.size).toBeGreaterThanOrEqual(20);
});
