/** A real API server on a free port, wired to the run's Postgres and Temporal dev server. */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { vi } from 'vitest';
import type { Client } from '@temporalio/client';
import { buildApiApp, type ApiDeps } from '../../src/api/app.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { OutboxRelay } from '../../src/api/outbox.ts';
import { OrderWaits, type OrderWait } from '../../src/api/order-waits.ts';
import { insertApiKey, insertTenant } from '../../src/tenants/sql.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import { Ledger } from 'onceflow';
import { testDatabaseUrl, temporalAddress, temporalClient, testPool, uniq } from '../support/env.ts';
import { deferred } from '../support/wait.ts';

export interface TestApi {
  url: string;
  app: FastifyInstance;
  pool: Pool;
  ledger: Ledger;
  client: Client;
  config: Config;
  relay: OutboxRelay;
  close(): Promise<void>;
}

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: temporalAddress(),
    // A task queue no worker polls: these tests check starts, not executions.
    TEMPORAL_TASK_QUEUE: uniq('api-tests'),
    WEBHOOK_SECRET: 'whsec_test_api',
    ...env,
  });
}

export async function startApi(
  opts: {
    env?: Record<string, string>;
    localWaitMs?: number;
    poolMax?: number;
    onRequestMetrics?: ApiDeps['onRequestMetrics'];
    /** Replaces the app's own long-poll waker (which it would start and stop itself). */
    orderWaits?: (pool: Pool) => NonNullable<ApiDeps['orderWaits']>;
    /** Replaces the app's restore gate (e.g. one that reads on every request). */
    recovery?: (pool: Pool) => NonNullable<ApiDeps['recovery']>;
  } = {},
): Promise<TestApi> {
  const config = testConfig(opts.env);
  const pool = testPool(opts.poolMax ?? 20, config.databaseUrl);
  const ledger = new Ledger(pool, { localWaitMs: opts.localWaitMs ?? 5000 });
  const { client, close: closeClient } = await temporalClient();
  const relay = new OutboxRelay({
    pool,
    temporal: client,
    enabled: config.api.outboxRelay,
    pollMs: 100,
  });
  const app = await buildApiApp({
    pool,
    ledger,
    temporal: client,
    config,
    relay,
    ...(opts.onRequestMetrics ? { onRequestMetrics: opts.onRequestMetrics } : {}),
    ...(opts.orderWaits ? { orderWaits: opts.orderWaits(pool) } : {}),
    ...(opts.recovery ? { recovery: opts.recovery(pool) } : {}),
  });
  const port = await freePort();
  await app.listen({ host: '127.0.0.1', port });
  return {
    url: `http://127.0.0.1:${port}`,
    app,
    pool,
    ledger,
    client,
    config,
    relay,
    async close() {
      await app.close();
      await relay.stop();
      await closeClient();
      await pool.end();
    },
  };
}

/** A fresh tenant with its own API key, so counts in one test never see another test's rows. */
export async function newTenant(pool: Pool, prefix = 't'): Promise<{ tenantId: string; key: string }> {
  const tenantId = uniq(prefix).toLowerCase();
  const key = `sk_test_${uniq('k')}`;
  await insertTenant(pool, { id: tenantId, name: tenantId });
  await insertApiKey(pool, { keyHash: hashApiKey(key), tenantId, label: 'test' });
  return { tenantId, key };
}

export const validOrder = () => ({
  customer: { id: 'cus_1', email: 'a@example.com' },
  currency: 'usd',
  items: [{ sku: 'SKU-1', quantity: 2, unitAmount: 1500 }],
  paymentMethod: 'pm_card_visa',
});

export interface Res {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

export async function call(
  api: { url: string },
  method: string,
  path: string,
  opts: { key?: string; idem?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {},
): Promise<Res> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  if (opts.idem !== undefined) headers['idempotency-key'] = opts.idem;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(`${api.url}${path}`, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/**
 * Sends bytes fetch refuses to send (repeated headers, NUL, raw non-ASCII).
 * Returns the status line's code, the headers and the body.
 */
export function rawRequest(
  api: { url: string },
  head: string,
  body: Buffer | string = '',
): Promise<{ status: number; headers: string; body: string }> {
  const { hostname, port } = new URL(api.url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    const chunks: Buffer[] = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const [headPart = '', ...rest] = text.split('\r\n\r\n');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(headPart);
      resolve({ status: m ? Number(m[1]) : 0, headers: headPart, body: rest.join('\r\n\r\n') });
    });
    const bodyBuf = Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1');
    socket.write(
      Buffer.concat([
        Buffer.from(
          `${head.replace(/\r?\n$/, '')}\r\nHost: ${hostname}\r\nContent-Length: ${bodyBuf.length}\r\n` +
            `Connection: close\r\n\r\n`,
          'latin1',
        ),
        bodyBuf,
      ]),
    );
  });
}

/** Rows this tenant owns in every table the API writes. */
export async function tenantCounts(pool: Pool, tenantId: string) {
  const { rows } = await pool.query<{ orders: number; operations: number; outbox: number }>(
    `select (select count(*)::int from orders where tenant_id = $1) as orders,
            (select count(*)::int from operations where tenant_id = $1) as operations,
            (select count(*)::int from workflow_outbox where tenant_id = $1) as outbox`,
    [tenantId],
  );
  return rows[0]!;
}

export const PROBLEM = 'https://onceflow.dev/problems/';

/**
 * Resolves `waiting` once a long-poll of `orderId` (GET ?wait=) has read the
 * order and begun to wait for a change (its first OrderWait.next): from
 * then on, a change can reach that request only through a wake (or a timed
 * re-read), not through its first read. Spies on OrderWaits.prototype.watch,
 * so it sees the app's own waker too; call restore() in a finally.
 */
export function longPollWaiting(orderId: string): { waiting: Promise<void>; restore(): void } {
  const waiting = deferred();
  const watch = OrderWaits.prototype.watch;
  const spy = vi.spyOn(OrderWaits.prototype, 'watch').mockImplementation(function (
    this: OrderWaits,
    id: string,
  ): OrderWait {
    const wait = watch.call(this, id);
    if (id !== orderId) return wait;
    return {
      next(maxMs) {
        const next = wait.next(maxMs);
        waiting.resolve();
        return next;
      },
      done: () => wait.done(),
    };
  });
  return { waiting: waiting.promise, restore: () => spy.mockRestore() };
}
