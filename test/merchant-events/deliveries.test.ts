/**
 * Merchant webhooks end to end (issue 46): a real API, a real worker on the same task queue, the
 * sandbox provider, and real HTTP receivers: one that answers 500 then 200, one that hangs, one
 * that is down and comes back, and one that redirects to another address. Short retry settings
 * stand in for the production schedule (5 s doubling to 1 h, for 3 days).
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from '../api/support.ts';
import { uniq } from '../support/env.ts';
import { stepKeys } from '../../src/orders/model.ts';
import { until } from '../support/wait.ts';
import { freePort } from '../../src/process/ports.ts';
import { recordAttempt } from '../../src/merchant-events/sql.ts';
import { startReceiver } from '../support/webhooks.ts';

describe('merchant webhooks', () => {
  let stack: OrderStack;
  let api: TestApi;
  let acme: { tenantId: string; key: string };
  let globex: { tenantId: string; key: string };
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    stack = await startOrderStack({
      webhooks: { allowPrivate: true, firstRetryMs: 300, maxRetryMs: 1_000, retryWindowMs: 8_000 },
    });
    api = await startApi({
      env: { TEMPORAL_TASK_QUEUE: stack.taskQueue, WEBHOOK_ALLOW_PRIVATE_URLS: 'true' },
    });
    // The API process's relay loop: it starts the delivery workflows that transitions record.
    api.relay.start();
    acme = await newTenant(api.pool, 'acme');
    globex = await newTenant(api.pool, 'globex');
  });
  afterAll(async () => {
    for (const c of closers) await c();
    await api?.close();
    await stack?.close();
  });

  async function endpoint(
    tenant: { key: string },
    url: string,
    events = ['order.completed', 'order.rejected'],
  ) {
    const res = await call(api, 'POST', '/v1/webhook-endpoints', {
      key: tenant.key,
      idem: uniq('we'),
      body: { url, events },
    });
    expect(res.status, res.text).toBe(201);
    return res.body as { id: string; secret: string; url: string; events: string[] };
  }

  async function completedOrder(tenant: { key: string }) {
    const res = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: uniq('o'),
      body: validOrder(),
    });
    expect(res.status).toBe(202);
    const { id } = res.body as { id: string };
    const done = await call(api, 'GET', `/v1/orders/${id}?wait=30`, { key: tenant.key });
    expect((done.body as { status: string }).status).toBe('completed');
    return done.body as { id: string; status: string };
  }

  const delivery = async (endpointId: string, eventId: string) =>
    (
      await api.pool.query(
        'select status, attempts, last_status from webhook_deliveries where endpoint_id = $1 and event_id = $2',
        [endpointId, eventId],
      )
    ).rows[0] as { status: string; attempts: number; last_status: number | null } | undefined;

  it('delivers a signed order.completed carrying the order as GET shows it, after a 500, once per event ID', async () => {
    const flaky = await startReceiver((n) => (n === 1 ? 500 : 200));
    closers.push(flaky.close);
    const ep = await endpoint(acme, flaky.url);
    expect(ep.secret).toMatch(/^whsec_[A-Za-z0-9+/=]+$/);
    const order = await completedOrder(acme);

    await until('a retried delivery', () => flaky.received.length >= 2, { timeoutMs: 20_000 });
    const [first, second] = flaky.received;
    // The same event on every retry: same webhook-id, a receiver dedupes on it.
    expect(second!.id).toBe(first!.id);
    expect(second!.id).toMatch(/^evt_[0-9a-f]{32}$/);
    const verified = new Webhook(ep.secret).verify(second!.body, {
      'webhook-id': String(second!.headers['webhook-id']),
      'webhook-timestamp': String(second!.headers['webhook-timestamp']),
      'webhook-signature': String(second!.headers['webhook-signature']),
    }) as { id: string; type: string; data: { object: Record<string, unknown>; version: number } };
    expect(verified.type).toBe('order.completed');
    expect(verified.id).toBe(second!.id);
    const get = (await call(api, 'GET', `/v1/orders/${order.id}`, { key: acme.key })).body as Record<
      string,
      unknown
    >;
    expect(verified.data.object).toEqual(get);
    // Derived from the status step's key, so a retried, reset or recovered step can only bring this ID.
    const stepKey = stepKeys.status(String(get.workflowId), 'completed');
    expect(verified.id).toBe(`evt_${createHash('sha256').update(stepKey).digest('hex').slice(0, 32)}`);
    const seq = await api.pool.query('select status_seq from orders where id = $1', [order.id]);
    expect(verified.data.version).toBe(seq.rows[0].status_seq);

    await until('succeeded', async () => (await delivery(ep.id, second!.id))?.status === 'succeeded', {
      timeoutMs: 10_000,
    });
    const d = await delivery(ep.id, second!.id);
    expect(d).toMatchObject({ attempts: 2, last_status: 200 });
    const attempts = (
      await api.pool.query(
        'select status_code from webhook_delivery_attempts where event_id = $1 order by id',
        [second!.id],
      )
    ).rows.map((r: { status_code: number }) => r.status_code);
    expect(attempts).toEqual([500, 200]);
    // Nothing more arrives for this event once it succeeded.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(flaky.received.filter((r) => r.id === second!.id)).toHaveLength(2);
  });

  it("counts toward the backoff only the attempts sent in the delivery's current window", async () => {
    const tenant = await newTenant(api.pool, 'window');
    const ok = await startReceiver(() => 200);
    closers.push(ok.close);
    const ep = await endpoint(tenant, ok.url);
    await completedOrder(tenant);
    await until('delivered', () => ok.received.length === 1, { timeoutMs: 15_000 });
    const eventId = ok.received[0]!.id;
    await until('recorded', async () => (await delivery(ep.id, eventId))?.status === 'succeeded', {
      timeoutMs: 10_000,
    });
    const attempt = (startedAt = new Date()) =>
      recordAttempt(api.pool, {
        endpointId: ep.id,
        eventId,
        startedAt,
        latencyMs: 1,
        statusCode: 500,
        error: null,
        responseExcerpt: null,
      });
    expect(await attempt()).toBe(1);
    expect(await attempt()).toBe(2);
    // A redelivery starts a window of its own: its first failure waits the first retry's delay again.
    // Its attempts may start in the same millisecond as the redelivery's microsecond timestamp.
    const { rows } = await api.pool.query<{ at: Date }>(
      `update webhook_deliveries set redelivered_at = date_trunc('milliseconds', now()) + interval '500 microseconds'
        where endpoint_id = $1 and event_id = $2 returning redelivered_at as at`,
      [ep.id, eventId],
    );
    const sameMillisecond = rows[0]!.at;
    expect(await attempt(sameMillisecond)).toBe(0);
    expect(await attempt(sameMillisecond)).toBe(1);
    expect((await delivery(ep.id, eventId))?.attempts).toBe(5);
  });

  it('a hanging endpoint does not hold up another endpoint of the same tenant', async () => {
    const tenant = await newTenant(api.pool, 'hang');
    const hang = await startReceiver(() => 'hang');
    const fine = await startReceiver(() => 204);
    closers.push(hang.close, fine.close);
    await endpoint(tenant, hang.url);
    await endpoint(tenant, fine.url);
    await completedOrder(tenant);
    await until('both endpoints called', () => fine.received.length === 1 && hang.received.length >= 1, {
      timeoutMs: 15_000,
    });
    expect(fine.received[0]!.id).toBe(hang.received[0]!.id);
  });

  it('an endpoint that is down is retried until it is back', async () => {
    const tenant = await newTenant(api.pool, 'down');
    const port = await freePort();
    const ep = await endpoint(tenant, `http://127.0.0.1:${port}/hooks`);
    await completedOrder(tenant);
    const eventId = await until(
      'two refused attempts',
      async () => {
        const { rows } = await api.pool.query(
          'select event_id from webhook_deliveries where endpoint_id = $1 and attempts >= 2',
          [ep.id],
        );
        return rows[0]?.event_id as string | undefined;
      },
      { timeoutMs: 15_000 },
    );
    const back = await startReceiver(() => 200, port);
    closers.push(back.close);
    await until(
      'delivered after the outage',
      async () => (await delivery(ep.id, eventId))?.status === 'succeeded',
      { timeoutMs: 15_000 },
    );
    expect(back.received.map((r) => r.id)).toEqual([eventId]);
  });

  it('never follows a redirect: the target is not contacted and the delivery fails after its window', async () => {
    const tenant = await newTenant(api.pool, 'redir');
    const target = await startReceiver(() => 200);
    const redirecting = await startReceiver(() => 'redirect');
    redirecting.redirectTo(target.url);
    closers.push(target.close, redirecting.close);
    const ep = await endpoint(tenant, redirecting.url);
    await completedOrder(tenant);
    await until('first attempt', () => redirecting.received.length >= 1, { timeoutMs: 10_000 });
    const eventId = redirecting.received[0]!.id;
    await until('failed', async () => (await delivery(ep.id, eventId))?.status === 'failed', {
      timeoutMs: 30_000,
    });
    expect(target.received).toHaveLength(0);
    expect((await delivery(ep.id, eventId))?.last_status).toBe(302);
  });

  it('a refund that succeeds is delivered as refund.succeeded, carrying the refund as GET shows it', async () => {
    const tenant = await newTenant(api.pool, 'refund');
    const rec = await startReceiver(() => 200);
    closers.push(rec.close);
    await endpoint(tenant, rec.url, ['refund.succeeded']);
    const order = await completedOrder(tenant);
    const created = await call(api, 'POST', `/v1/orders/${order.id}/refunds`, {
      key: tenant.key,
      idem: uniq('r'),
      body: { amount: 100 },
    });
    expect(created.status).toBe(202);
    const { id } = created.body as { id: string };
    await until('refund.succeeded delivered', () => rec.received.length === 1, { timeoutMs: 30_000 });
    const event = JSON.parse(rec.received[0]!.body) as { type: string; data: { object: unknown } };
    expect(event.type).toBe('refund.succeeded');
    const get = await call(api, 'GET', `/v1/orders/${order.id}/refunds/${id}`, { key: tenant.key });
    expect(event.data.object).toEqual(get.body);
    // Only the subscribed type: the order's own completion was not sent to this endpoint.
    expect(rec.received).toHaveLength(1);
  });

  it('a tenant sees and removes only its own endpoints; the secret is never listed', async () => {
    const ep = await endpoint(acme, 'http://127.0.0.1:9/none');
    const mine = (await call(api, 'GET', '/v1/webhook-endpoints', { key: acme.key })).body as {
      data: { id: string }[];
    };
    expect(mine.data.map((e) => e.id)).toContain(ep.id);
    expect(JSON.stringify(mine)).not.toContain('whsec_');
    const theirs = (await call(api, 'GET', '/v1/webhook-endpoints', { key: globex.key })).body as {
      data: unknown[];
    };
    expect(theirs.data).toEqual([]);
    expect((await call(api, 'DELETE', `/v1/webhook-endpoints/${ep.id}`, { key: globex.key })).status).toBe(
      404,
    );
    expect((await call(api, 'DELETE', `/v1/webhook-endpoints/${ep.id}`, { key: acme.key })).status).toBe(204);
    expect((await call(api, 'DELETE', `/v1/webhook-endpoints/${ep.id}`, { key: acme.key })).status).toBe(404);
  });

  it('create is idempotent; rotation signs with both secrets during the overlap', async () => {
    const idem = uniq('we');
    const body = { url: 'http://127.0.0.1:9/x', events: ['order.completed'] };
    const a = await call(api, 'POST', '/v1/webhook-endpoints', { key: acme.key, idem, body });
    const b = await call(api, 'POST', '/v1/webhook-endpoints', { key: acme.key, idem, body });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    expect(b.body).toEqual(a.body);
    const other = await call(api, 'POST', '/v1/webhook-endpoints', {
      key: acme.key,
      idem,
      body: { ...body, url: 'http://127.0.0.1:9/y' },
    });
    expect(other.status).toBe(422);

    const rec = await startReceiver(() => 200);
    closers.push(rec.close);
    const tenant = await newTenant(api.pool, 'rot');
    const ep = await endpoint(tenant, rec.url);
    const rotated = await call(api, 'POST', `/v1/webhook-endpoints/${ep.id}/rotate-secret`, {
      key: tenant.key,
      body: { overlapSeconds: 600 },
    });
    expect(rotated.status).toBe(200);
    const next = rotated.body as { secret: string; previousSecretExpiresAt: string };
    expect(next.secret).not.toBe(ep.secret);
    await completedOrder(tenant);
    await until('delivery', () => rec.received.length === 1, { timeoutMs: 15_000 });
    const r = rec.received[0]!;
    const headers = {
      'webhook-id': String(r.headers['webhook-id']),
      'webhook-timestamp': String(r.headers['webhook-timestamp']),
      'webhook-signature': String(r.headers['webhook-signature']),
    };
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    // A receiver holding either secret accepts it.
    expect(() => new Webhook(ep.secret).verify(r.body, headers)).not.toThrow();
    expect(() => new Webhook(next.secret).verify(r.body, headers)).not.toThrow();
  });

  it('refuses a URL outside the policy with a clear problem, storing nothing', async () => {
    const res = await call(api, 'POST', '/v1/webhook-endpoints', {
      key: acme.key,
      idem: uniq('we'),
      body: { url: 'ftp://example.com/x', events: ['order.completed'] },
    });
    expect(res.status).toBe(422);
    expect((res.body as { type: string }).type).toMatch(/webhook-url-refused$/);
  });
});
