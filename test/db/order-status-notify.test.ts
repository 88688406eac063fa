/**
 * The `order_status` notification (migrations 0012-0014): a change of an
 * order's status notifies `<id> <status>` at commit, and only for a
 * terminal status, the one thing its listeners (the API's long-polls) wait for.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import { TERMINAL_STATUSES, TRANSITIONS, type OrderStatus } from '../../src/orders/model.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { testDatabaseUrl, testPool, uniq } from '../support/env.ts';

let pool: Pool;
let listener: pg.Client;
const received: string[] = [];

beforeAll(async () => {
  pool = testPool(2);
  listener = new pg.Client({ connectionString: testDatabaseUrl() });
  await listener.connect();
  listener.on('notification', (msg) => received.push(msg.payload ?? ''));
  await listener.query('LISTEN order_status');
});

afterAll(async () => {
  await listener?.end();
  await pool?.end();
});

async function newOrder(): Promise<{ tenantId: string; orderId: string }> {
  const orderId = uniq('ord');
  await insertAcceptedOrder(pool, {
    tenantId: 'acme',
    orderId,
    workflowId: `order/acme/${orderId}`,
    amount: 100,
    currency: 'usd',
    customerId: 'cus_1',
    customerEmail: 'a@example.com',
    items: [{ sku: 'SKU-1', quantity: 1, unitAmount: 100 }],
    paymentMethod: 'pm_card_visa',
  });
  return { tenantId: 'acme', orderId };
}

/** Every status reachable from `accepted`, each with a path of statuses that leads to it. */
function pathsFromAccepted(): Map<OrderStatus, OrderStatus[]> {
  const paths = new Map<OrderStatus, OrderStatus[]>([['accepted', []]]);
  const queue: OrderStatus[] = ['accepted'];
  for (let from = queue.shift(); from !== undefined; from = queue.shift()) {
    for (const to of TRANSITIONS[from]) {
      if (paths.has(to)) continue;
      paths.set(to, [...paths.get(from)!, to]);
      queue.push(to);
    }
  }
  return paths;
}

describe('order_status notifications', () => {
  it('every reachable status is entered; only the terminal ones notify, with `<id> <status>`', async () => {
    const paths = pathsFromAccepted();
    // The test must visit the terminal statuses and at least one that is not.
    expect([...paths.keys()]).toEqual(expect.arrayContaining([...TERMINAL_STATUSES, 'paid']));
    const expected: string[] = [];
    const marker = await newOrder();
    for (const [status, path] of paths) {
      if (path.length === 0) continue;
      const { tenantId, orderId } = await newOrder();
      for (const step of path) {
        await pool.query('update orders set status = $3 where tenant_id = $1 and id = $2', [
          tenantId,
          orderId,
          step,
        ]);
        if (TERMINAL_STATUSES.includes(step)) expected.push(`${orderId} ${step}`);
      }
      expect(path.at(-1)).toBe(status);
    }
    // Notifications arrive in commit order: once the marker's arrives, all earlier ones have.
    await pool.query(`update orders set status = 'rejected' where tenant_id = $1 and id = $2`, [
      marker.tenantId,
      marker.orderId,
    ]);
    const last = `${marker.orderId} rejected`;
    await expect.poll(() => received.includes(last), { timeout: 10_000 }).toBe(true);
    expect(received.slice(0, received.indexOf(last))).toEqual(expected);
    expect(expected.length).toBeGreaterThan(0);
  });
});
