/**
 * GET /v1/orders/{id}?wait=N wakes on the order's status notification
 * (src/api/order-waits.ts), survives losing its listening connection, and
 * falls back to re-reading while it has none. Behaviour, not speed: every
 * re-read interval here is far longer than the wait, so only a wake can
 * return the new status before the wait runs out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrderWaits, parseStatusNotification } from '../../src/api/order-waits.ts';
import { call, longPollWaiting, newTenant, startApi, validOrder, type TestApi } from './support.ts';
import net from 'node:net';
import type { Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';

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

/**
 * Starts a long-poll, waits until it has read the order and waits for a change, then completes
 * the order: the new status can reach the request only through a wake or a re-read.
 */
async function completeWhileWaiting(
  api: TestApi,
  waits: OrderWaits,
  tenant: { tenantId: string; key: string },
): Promise<OrderBody> {
  const id = await createOrder(api, tenant.key);
  const before = waits.waiting;
  const poll = longPollWaiting(id);
  try {
    const polled = call(api, 'GET', `/v1/orders/${id}?wait=${WAIT_S}`, { key: tenant.key });
    const first = await Promise.race([
      poll.waiting.then(() => 'waiting' as const),
      polled.then((res) => ({ answeredWithoutWaiting: res.body })),
    ]);
    expect(first).toBe('waiting');
    expect(waits.waiting).toBe(before + 1);
    await api.pool.query(`update orders set status = 'completed' where tenant_id = $1 and id = $2`, [
      tenant.tenantId,
      id,
    ]);
    const res = await polled;
    expect(res.status).toBe(200);
    return res.body as OrderBody;
  } finally {
    poll.restore();
  }
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
    await until('the order-status listener to listen', () => waits.listening, { timeoutMs: 15_000 });
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

describe('GET /v1/orders/{id}?wait=: while the listening connection stays down', () => {
  let waits: OrderWaits;
  let pool: Pool;

  beforeAll(async () => {
    // A port nothing listens on: every reconnect of the listener fails at once, as with Postgres down.
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    pool = testPool(1, `postgres://nobody@127.0.0.1:${port}/none`);
    // The default re-read intervals; a fast reconnect loop, so failed reconnects are many.
    waits = new OrderWaits({ pool, reconnectMs: 50, maxReconnectMs: 200 });
    waits.start();
  });
  afterAll(async () => {
    await waits?.stop();
    await pool?.end();
  });

  it(
    're-reads back off (not every 250 ms), and the waiters do not re-read in lockstep',
    async () => {
      const WINDOW_MS = 4_000;
      const WAITERS = 10;
      const started = Date.now();
      const end = started + WINDOW_MS;
      // Each waiter loops as the route does: one re-read per wake, until its deadline.
      const reads = await Promise.all(
        Array.from({ length: WAITERS }, async () => {
          const wait = waits.watch('ord_down');
          const at: number[] = [];
          try {
            for (;;) {
              const left = end - Date.now();
              if (left <= 0) return at;
              await wait.next(left);
              if (Date.now() < end) at.push(Date.now() - started);
            }
          } finally {
            wait.done();
          }
        }),
      );
      expect(waits.listening).toBe(false);
      const counts = reads.map((r) => r.length);
      // Every 250 ms would be 16 re-reads per waiter; backing off from 250 ms, at most 5.
      expect(Math.max(...counts), `re-reads per waiter: ${counts.join(',')}`).toBeLessThanOrEqual(6);
      for (const at of reads) {
        expect(at.length).toBeGreaterThanOrEqual(2);
        const gaps = at.slice(1).map((t, i) => t - at[i]!);
        expect(gaps.at(-1)!, `gaps: ${gaps.join(',')}`).toBeGreaterThan(at[0]!);
      }
      // Jitter: the waiters' second re-reads are spread out, not all in the same instant.
      const second = reads.map((r) => r[1]!);
      expect(
        Math.max(...second) - Math.min(...second),
        `second re-reads at: ${second.join(',')}`,
      ).toBeGreaterThan(50);
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
