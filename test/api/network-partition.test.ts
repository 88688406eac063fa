/**
 * The API with Postgres behind a network partition (issue 45, "fail fast, with
 * the documented answer"): a TCP proxy between the API and Postgres stops
 * forwarding without closing anything, as a firewall that drops packets does,
 * so only the API's own bounds can end a wait. The app is wired as
 * src/api/main.ts wires it (its pool bounds, its ledger wait, its admin
 * routes); Temporal is an address nobody listens on.
 *
 * - Every route answers 503 `unavailable` with Retry-After, bounded by the
 *   pool's connect and query timeouts (API_DB_*), never 500 and never a hang.
 *   The bound is the configuration's: these tests only fail a request that
 *   outlives three times the documented 5 s.
 * - A create's retry under the same Idempotency-Key after the heal makes
 *   exactly one order, whichever side of its COMMIT the link was cut: before
 *   (another API instance meanwhile gets 409 in-progress), or after (the
 *   retry replays the order that committed).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import type { Pool } from '../../src/db/index.ts';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { freePort } from '../../src/process/ports.ts';
import { Resources } from '../../src/process/resources.ts';
import { apiPoolTimeouts, createLedger, openPool } from '../../src/process/wiring.ts';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.ts';
import { testDatabaseUrl, testPool, uniq } from '../support/env.ts';
import { PROBLEM, newTenant, validOrder } from './support.ts';

/** The documented bound (docs/DEPLOYING.md, "Postgres timeouts"): every answer within 5 s. */
const BOUND_MS = 5_000;
/** A request still unanswered after this hangs: the test fails instead of waiting for it. */
const HANG_MS = 3 * BOUND_MS;

const WEBHOOK_SECRET = 'whsec_test_partition';

interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function send(
  url: string,
  method: string,
  path: string,
  opts: { key?: string; idem?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  if (opts.idem) headers['idempotency-key'] = opts.idem;
  const body = opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${url}${path}`, { method, headers, body, signal: AbortSignal.timeout(HANG_MS) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as Answer['body']) : {} };
}

/** The documented answer to a request that met the partition. */
function expectUnavailable(what: string, a: Answer): void {
  expect({ what, status: a.status, type: a.body.type }).toEqual({
    what,
    status: 503,
    type: `${PROBLEM}unavailable`,
  });
  expect(a.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(Number(a.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  expect(a.body.status).toBe(503);
}

/** The API as src/api/main.ts wires it, on `databaseUrl`, listening on a free port. */
async function startApi(
  databaseUrl: string,
  closers: (() => Promise<unknown>)[],
): Promise<{ url: string; app: FastifyInstance; pool: Pool; config: Config }> {
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    // Nobody listens there: Temporal is not what these tests partition.
    TEMPORAL_ADDRESS: `127.0.0.1:${await freePort()}`,
    TEMPORAL_TASK_QUEUE: uniq('partition'),
    WEBHOOK_SECRET,
    // Nothing starts workflows: an accepted order's start intent waits in the outbox for a relay.
    OUTBOX_RELAY: 'off',
  });
  const resources = new Resources();
  closers.push(() => resources.closeAll());
  const pool = openPool(resources, config, {
    max: 5,
    applicationName: 'onceflow-api-partition-test',
    timeouts: apiPoolTimeouts(config),
  });
  const connection = resources.add('temporal', Connection.lazy({ address: config.temporal.address }), (c) =>
    c.close(),
  );
  const temporal = new Client({ connection, namespace: config.temporal.namespace });
  const ledger = createLedger(pool, config, undefined, { localWaitMs: config.api.db.idempotencyWaitMs });
  const app = resources.add('http server', await buildApiServer({ pool, ledger, temporal, config }), (a) =>
    a.close(),
  );
  const port = await freePort();
  await app.listen({ host: '127.0.0.1', port });
  return { url: `http://127.0.0.1:${port}`, app, pool, config };
}

describe('the API with Postgres behind a network partition', () => {
  const closers: (() => Promise<unknown>)[] = [];
  let proxy: TcpProxy;
  let direct: Pool;
  let api: Awaited<ReturnType<typeof startApi>>;

  beforeAll(async () => {
    const target = new URL(testDatabaseUrl());
    proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
    closers.push(() => proxy.close());
    direct = testPool(3);
    closers.push(() => direct.end());
    api = await startApi(proxy.via(testDatabaseUrl()), closers);
  });
  afterEach(() => {
    // Nothing closes over a cut link: a pool's end() would wait for Postgres' goodbye.
    proxy.heal();
  });
  afterAll(async () => {
    proxy?.heal();
    for (const close of closers.splice(0).reverse()) await close();
  });

  const ordersOf = async (tenantId: string) =>
    (await direct.query<{ id: string }>('select id from orders where tenant_id = $1', [tenantId])).rows;
  const createRecords = async (tenantId: string, key: string) =>
    (
      await direct.query<{ state: string }>(
        'select state from operations where tenant_id = $1 and operation_type = $2 and key = $3',
        [tenantId, OPERATION_TYPES.createOrder, key],
      )
    ).rows;

  it('every route answers 503 with Retry-After while the link is cut; after the heal a retried create makes one order', async () => {
    const t = await newTenant(direct, 'part');
    // A key this process has never verified: its lookup needs Postgres too.
    const stranger = await newTenant(direct, 'stranger');
    const first = await send(api.url, 'POST', '/v1/orders', {
      key: t.key,
      idem: uniq('idem'),
      body: validOrder(),
    });
    expect(first.status).toBe(202);
    const orderId = first.body.id as string;
    // Refundable, as its workflow would leave it.
    await direct.query(
      `update orders set status = 'completed', charge_id = $3 where tenant_id = $1 and id = $2`,
      [t.tenantId, orderId, `ch_${orderId}`],
    );
    // Open connections in the pool, so both kinds meet the cut: established ones (their query gets no
    // answer) and new ones (their start-up gets none).
    await Promise.all(
      Array.from({ length: 3 }, () => send(api.url, 'GET', `/v1/orders/${orderId}`, { key: t.key })),
    );
    const webhook = JSON.stringify({
      id: `evt_${uniq('e')}`,
      type: 'charge.succeeded',
      created: Math.floor(Date.now() / 1000),
      data: {
        object: {
          id: `ch_${orderId}`,
          amount: 3000,
          currency: 'usd',
          status: 'succeeded',
          metadata: { order_id: orderId, tenant_id: t.tenantId },
        },
      },
    });

    proxy.blackhole();
    const orderKey = uniq('idem');
    const refundKey = uniq('ridem');
    const refundBody = { amount: 1000 };
    const requests: [string, Promise<Answer>][] = [
      [
        'create order',
        send(api.url, 'POST', '/v1/orders', { key: t.key, idem: orderKey, body: validOrder() }),
      ],
      ['get order', send(api.url, 'GET', `/v1/orders/${orderId}`, { key: t.key })],
      ['list orders', send(api.url, 'GET', '/v1/orders', { key: t.key })],
      [
        'create refund',
        send(api.url, 'POST', `/v1/orders/${orderId}/refunds`, {
          key: t.key,
          idem: refundKey,
          body: refundBody,
        }),
      ],
      ['list refunds', send(api.url, 'GET', `/v1/orders/${orderId}/refunds`, { key: t.key })],
      ['unverified key', send(api.url, 'GET', '/v1/orders', { key: stranger.key })],
      [
        'webhook',
        send(api.url, 'POST', '/v1/webhooks/payments', {
          raw: webhook,
          headers: {
            'onceflow-signature': signWebhook(WEBHOOK_SECRET, webhook, Math.floor(Date.now() / 1000)),
          },
        }),
      ],
      [
        'admin attention list',
        send(api.url, 'GET', '/admin/attention', {
          headers: { authorization: `Bearer ${api.config.adminToken}` },
        }),
      ],
      ['readiness', send(api.url, 'GET', '/readyz')],
    ];
    const answers = await Promise.all(requests.map(async ([what, p]) => [what, await p] as const));
    for (const [what, answer] of answers) {
      if (what === 'readiness') {
        // Its own documented body (checks), the same status.
        expect(answer.status).toBe(503);
        continue;
      }
      expectUnavailable(what, answer);
    }

    proxy.heal();
    const retry = await send(api.url, 'POST', '/v1/orders', {
      key: t.key,
      idem: orderKey,
      body: validOrder(),
    });
    expect(retry.status).toBe(202);
    const again = await send(api.url, 'POST', '/v1/orders', {
      key: t.key,
      idem: orderKey,
      body: validOrder(),
    });
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.id).toBe(retry.body.id);
    // The order accepted before the cut and the one retried after it: nothing twice.
    expect((await ordersOf(t.tenantId)).map((o) => o.id).sort()).toEqual([orderId, retry.body.id].sort());
    expect(await createRecords(t.tenantId, orderKey)).toEqual([{ state: 'succeeded' }]);

    const refund = await send(api.url, 'POST', `/v1/orders/${orderId}/refunds`, {
      key: t.key,
      idem: refundKey,
      body: refundBody,
    });
    expect(refund.status).toBe(202);
    const refunds = await direct.query('select id from refunds where tenant_id = $1 and order_id = $2', [
      t.tenantId,
      orderId,
    ]);
    expect(refunds.rows).toEqual([{ id: refund.body.id }]);
    // The pool serves again: the connections the cut broke were discarded, not handed out.
    expect((await send(api.url, 'GET', `/v1/orders/${orderId}`, { key: t.key })).status).toBe(200);
  });

  it('the link cut after the COMMIT went out: 503, and the retry replays the order that committed', async () => {
    const t = await newTenant(direct, 'after');
    const key = uniq('idem');
    proxy.blackholeWhen((chunk) => chunk.includes('COMMIT\0'), 'after');
    const lost = await send(api.url, 'POST', '/v1/orders', { key: t.key, idem: key, body: validOrder() });
    expectUnavailable('create order, answer lost', lost);
    // Committed, though nobody was told.
    const [order, ...more] = await ordersOf(t.tenantId);
    expect(more).toEqual([]);
    expect(await createRecords(t.tenantId, key)).toEqual([{ state: 'succeeded' }]);

    proxy.heal();
    const retry = await send(api.url, 'POST', '/v1/orders', { key: t.key, idem: key, body: validOrder() });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.id).toBe(order!.id);
    expect(await ordersOf(t.tenantId)).toEqual([order]);
  });

  it('the link cut before the COMMIT went out: another API instance answers 409 in-progress, and after the heal there is one order', async () => {
    const t = await newTenant(direct, 'before');
    const key = uniq('idem');
    // A second API process with a healthy link to the same database.
    const other = await startApi(testDatabaseUrl(), closers);
    proxy.blackholeWhen((chunk) => chunk.includes('COMMIT\0'), 'before');
    const lost = await send(api.url, 'POST', '/v1/orders', { key: t.key, idem: key, body: validOrder() });
    expectUnavailable('create order, COMMIT held', lost);
    // Postgres still holds the transaction open, its key claimed: a retry elsewhere must not create.
    const meanwhile = await send(other.url, 'POST', '/v1/orders', {
      key: t.key,
      idem: key,
      body: validOrder(),
    });
    expect(meanwhile.status).toBe(409);
    expect(meanwhile.body.type).toBe(`${PROBLEM}idempotency-key-in-progress`);
    expect(Number(meanwhile.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await ordersOf(t.tenantId)).toEqual([]);

    // The held COMMIT lands now (or, had the heal come later than API_IDLE_IN_TRANSACTION, Postgres
    // would have rolled it back): either way the retry's answer is the one order.
    proxy.heal();
    const retry = await send(api.url, 'POST', '/v1/orders', { key: t.key, idem: key, body: validOrder() });
    expect(retry.status).toBe(202);
    expect(await ordersOf(t.tenantId)).toEqual([{ id: retry.body.id }]);
    expect(await createRecords(t.tenantId, key)).toEqual([{ state: 'succeeded' }]);
    const fromOther = await send(other.url, 'POST', '/v1/orders', {
      key: t.key,
      idem: key,
      body: validOrder(),
    });
    expect(fromOther.status).toBe(202);
    expect(fromOther.headers.get('idempotent-replayed')).toBe('true');
    expect(fromOther.body.id).toBe(retry.body.id);
  });
});
