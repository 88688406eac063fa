/**
 * GET /v1/orders/{id}?wait=N wakes on the order's status notification
 * (src/api/order-waits.ts), survives losing its listening connection, and
 * falls back to re-reading while it has none. Behaviour, not speed: every
 * re-read interval here is far longer than the wait, so only a wake can
 * return the new status before the wait runs out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrderWaits, parseStatusNotification } from '../../src/api/order-waits.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';
import { uniq } from '../support/env.ts';

/** Longer than any wait in these tests: a re-read on this interval never happens within one. */
const NEVER_MS = 600_000;
/**
 * The long-poll's own deadline (the API's maximum). The route reads the order
 * once more when the deadline passes, so a request that was never woken would
 * still answer `completed` then: what proves the wake is that it answers
 * before the deadline. Tests that wait on it therefore have their own timeout
 * (TEST_MS) shorter than WAIT_S: a request that is not woken makes them fail.
 */
const WAIT_S = 30;
const TEST_MS = 25_000;

type OrderBody = { id: string; status: string };

async function createOrder(api: TestApi, key: string): Promise<string> {
  const res = await call(api, 'POST', '/v1/orders', { key, idem: uniq('idem'), body: validOrder() });
  expect(res.status).toBe(202);
  return (res.body as OrderBody).id;
}

/** Starts a long-poll, waits until it is registered and has had time to read, then completes the order. */
async function completeWhileWaiting(
  api: TestApi,
  waits: OrderWaits,
  tenant: { tenantId: string; key: string },
): Promise<OrderBody> {
  const id = await createOrder(api, tenant.key);
  const before = waits.waiting;
  const polled = call(api, 'GET', `/v1/orders/${id}?wait=${WAIT_S}`, { key: tenant.key });
  await expect.poll(() => waits.waiting, { timeout: 15_000 }).toBe(before + 1);
  // Give the request time for its first read, so the change lands while it waits (ordering only).
  await new Promise((r) => setTimeout(r, 300));
  await api.pool.query(`update orders set status = 'completed' where tenant_id = $1 and id = $2`, [
    tenant.tenantId,
    id,
  ]);
  const res = await polled;
  expect(res.status).toBe(200);
  return res.body as OrderBody;
}

describe('GET /v1/orders/{id}?wait=: woken by the status notification', () => {
  let api: TestApi;
  let waits: OrderWaits;
  let tenant: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi({
      orderWaits: (pool) =>
        (waits = new OrderWaits({
          pool,
          listeningPollMs: NEVER_MS,
          fallbackPollMs: NEVER_MS,
          reconnectMs: 50,
          maxReconnectMs: 200,
        })),
    });
    waits.start();
    for (let i = 0; !waits.listening; i++) {
      if (i > 300) throw new Error('the order-status listener never started listening');
      await new Promise((r) => setTimeout(r, 50));
    }
    tenant = await newTenant(api.pool, 'waits');
  });
  afterAll(async () => {
    await waits?.stop();
    await api?.close();
  });

  it(
    'returns the new status once it changes, with no re-read due before the wait ends',
    async () => {
      const body = await completeWhileWaiting(api, waits, tenant);
      expect(body.status).toBe('completed');
      expect(waits.waiting).toBe(0);
    },
    TEST_MS,
  );

  it('a change to another order does not end the wait early', async () => {
    const id = await createOrder(api, tenant.key);
    const other = await createOrder(api, tenant.key);
    const polled = call(api, 'GET', `/v1/orders/${id}?wait=2`, { key: tenant.key });
    await expect.poll(() => waits.waiting, { timeout: 15_000 }).toBe(1);
    await api.pool.query(`update orders set status = 'completed' where tenant_id = $1 and id = $2`, [
      tenant.tenantId,
      other,
    ]);
    const res = await polled;
    expect((res.body as OrderBody).status).toBe('accepted');
  });

  it('a status that is not terminal does not wake the waiter; a terminal one does', async () => {
    const id = await createOrder(api, tenant.key);
    // A second order whose terminal status is announced after the first one's non-terminal
    // ones: notifications reach the one listening connection in commit order, so once this
    // one's waiter has woken, the first order's notifications have been handled too.
    const marker = await createOrder(api, tenant.key);
    const wait = waits.watch(id);
    const markerWait = waits.watch(marker);
    try {
      let woken = false;
      const next = wait.next(20_000).then(() => (woken = true));
      const markerWoken = markerWait.next(20_000);
      const setStatus = (order: string, status: string) =>
        api.pool.query(`update orders set status = $3 where tenant_id = $1 and id = $2`, [
          tenant.tenantId,
          order,
          status,
        ]);
      await setStatus(id, 'payment_pending');
      await setStatus(id, 'paid');
      await setStatus(marker, 'completed');
      await markerWoken;
      expect(woken).toBe(false);
      await setStatus(id, 'completed');
      await next;
      expect(woken).toBe(true);
    } finally {
      wait.done();
      markerWait.done();
    }
  });

  it(
    'still wakes after its listening connection is killed (pg_terminate_backend): it reconnects',
    async () => {
      const pid = waits.backendPid;
      expect(pid).not.toBeNull();
      const { rows } = await api.pool.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [pid]);
      expect(rows[0]?.ok).toBe(true);
      await expect.poll(() => waits.listening && waits.backendPid !== pid, { timeout: 15_000 }).toBe(true);
      const body = await completeWhileWaiting(api, waits, tenant);
      expect(body.status).toBe('completed');
    },
    TEST_MS,
  );
});

describe('GET /v1/orders/{id}?wait=: while nothing listens', () => {
  let api: TestApi;
  let waits: OrderWaits;
  let tenant: { tenantId: string; key: string };

  beforeAll(async () => {
    // Never started: no listening connection, so only the fallback re-read can see the change.
    api = await startApi({
      orderWaits: (pool) => (waits = new OrderWaits({ pool, listeningPollMs: NEVER_MS, fallbackPollMs: 50 })),
    });
    tenant = await newTenant(api.pool, 'waits-down');
  });
  afterAll(async () => api?.close());

  it(
    'falls back to re-reading the row and still returns the new status',
    async () => {
      expect(waits.listening).toBe(false);
      const body = await completeWhileWaiting(api, waits, tenant);
      expect(body.status).toBe('completed');
    },
    TEST_MS,
  );
});

describe('order-status notification payloads', () => {
  it('`<id> <status>` wakes only for a terminal status; a bare id (the older trigger) always wakes', () => {
    expect(parseStatusNotification('ord_1 completed')).toEqual({ orderId: 'ord_1', wake: true });
    expect(parseStatusNotification('ord_1 needs_attention')).toEqual({ orderId: 'ord_1', wake: true });
    expect(parseStatusNotification('ord_1 rejected')).toEqual({ orderId: 'ord_1', wake: true });
    expect(parseStatusNotification('ord_1 paid')).toEqual({ orderId: 'ord_1', wake: false });
    expect(parseStatusNotification('ord_1 payment_unknown')).toEqual({ orderId: 'ord_1', wake: false });
    expect(parseStatusNotification('ord_1')).toEqual({ orderId: 'ord_1', wake: true });
  });
});
