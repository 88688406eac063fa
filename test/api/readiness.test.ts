/**
 * GET /readyz is public and unlimited, so it must be cheap: one real check
 * per second at most (concurrent probes share it), none of them holding a
 * connection of the pool that order creation needs, and a bounded answer
 * whatever Postgres or Temporal do. Temporal down is reported, not fatal: the
 * outbox keeps accepting orders. Postgres down is 503.
 *
 * The checks are counted on the real clients: every Temporal check is one
 * GetSystemInfo call, every pool checkout one `pool.connect`.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { buildApiApp } from '../../src/api/app.ts';
import { OrderWaits } from '../../src/api/order-waits.ts';
import { createPool, type Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import { Ledger } from 'onceflow';
import { startBlackhole, type Blackhole } from '../support/blackhole.ts';
import { testPool } from '../support/env.ts';
import { call, newTenant, startApi, testConfig, validOrder, type TestApi } from './support.ts';
import { uniq } from '../support/env.ts';

/** Counts calls to `obj[name]` and still makes them (the real client answers). */
function countCalls<T extends object, K extends keyof T>(obj: T, name: K): { count: () => number } {
  const real = obj[name] as (...args: unknown[]) => unknown;
  let n = 0;
  Object.defineProperty(obj, name, {
    configurable: true,
    writable: true,
    value: (...args: unknown[]) => {
      n++;
      return real.apply(obj, args);
    },
  });
  return { count: () => n };
}

interface Ready {
  status: number;
  body: { status?: string; checks?: Record<string, string> };
  ms: number;
}

async function readyz(url: string): Promise<Ready> {
  const started = performance.now();
  const res = await fetch(`${url}/readyz`);
  const body = (await res.json()) as Ready['body'];
  return { status: res.status, body, ms: performance.now() - started };
}

describe('readiness against the real Postgres and Temporal', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ env: { OUTBOX_RELAY: 'off' }, poolMax: 5 });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('a flood of 200 concurrent probes makes at most a couple of real checks and takes no pool connection', async () => {
    const temporalChecks = countCalls(api.client.workflowService, 'getSystemInfo');
    const checkouts = countCalls(api.pool, 'connect');
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: 200 }, () => readyz(api.url)));
    const elapsedMs = performance.now() - started;
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.body).toEqual({ status: 'ok', checks: { postgres: 'ok', temporal: 'ok' } });
    }
    // One check at a time, each result serving every probe for the 1 s TTL: at most one check
    // per TTL the flood lasted, plus the one in flight at its start. On a quiet machine the flood
    // fits in one TTL (1-2 checks); on a loaded one it may span a few, never one per probe.
    const ttls = Math.ceil(elapsedMs / 1_000);
    expect(temporalChecks.count()).toBeGreaterThanOrEqual(1);
    expect(temporalChecks.count()).toBeLessThanOrEqual(ttls + 1);
    expect(temporalChecks.count()).toBeLessThan(20);
    expect(checkouts.count()).toBe(0);

    // The answer is cached for a second, not forever: a later probe checks again.
    const before = temporalChecks.count();
    await expect
      .poll(async () => (await readyz(api.url), temporalChecks.count()), { timeout: 10_000 })
      .toBe(before + 1);
  });

  it('orders keep answering 202 through a flood of probes', async () => {
    const t = await newTenant(api.pool, 'ready');
    const probes = Array.from({ length: 200 }, () => readyz(api.url));
    const orders = await Promise.all(
      Array.from({ length: 10 }, () =>
        call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() }),
      ),
    );
    expect(orders.map((o) => o.status)).toEqual(orders.map(() => 202));
    for (const p of await Promise.all(probes)) expect(p.status).toBe(200);
  });
});

describe('readiness with a dependency down', () => {
  const closers: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });

  /** The API app as the tests build it, with the given pool and Temporal address, on a real port. */
  async function app(pool: Pool, temporalAddress?: string): Promise<{ url: string; client: Client }> {
    const config = testConfig({ OUTBOX_RELAY: 'off' });
    const connection = Connection.lazy({ address: temporalAddress ?? config.temporal.address });
    closers.push(() => connection.close());
    const client = new Client({ connection, namespace: config.temporal.namespace });
    const server = await buildApiApp({
      pool,
      ledger: new Ledger(pool),
      temporal: client,
      config,
      // Not started: with Postgres down its listener would only add noise.
      orderWaits: new OrderWaits({ pool }),
    });
    const port = await freePort();
    await server.listen({ host: '127.0.0.1', port });
    closers.push(() => server.close());
    return { url: `http://127.0.0.1:${port}`, client };
  }

  async function blackhole(): Promise<Blackhole> {
    const bh = await startBlackhole();
    closers.push(() => bh.close());
    return bh;
  }

  it('Temporal hanging: 200 within a bound, Temporal reported unavailable', async () => {
    const bh = await blackhole();
    const pool = testPool(3);
    closers.push(() => pool.end());
    const { url } = await app(pool, bh.address);
    const first = await readyz(url);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ status: 'ok', checks: { postgres: 'ok', temporal: 'unavailable' } });
    expect(first.ms).toBeLessThan(2_500); // the 1 s check bound, with room for a loaded machine
    expect(bh.accepted()).toBeGreaterThan(0);
  });

  it('Postgres hanging: 503 within a bound, and the pool is never touched', async () => {
    const bh = await blackhole();
    const pool = createPool(`postgres://postgres@${bh.address}/onceflow`, { max: 3 });
    closers.push(() => pool.end());
    const { url } = await app(pool);
    const answers = await Promise.all(Array.from({ length: 20 }, () => readyz(url)));
    for (const a of answers) {
      expect(a.status).toBe(503);
      expect(a.body.checks).toEqual({ postgres: 'unavailable', temporal: 'ok' });
      expect(a.ms).toBeLessThan(2_500);
    }
    expect(bh.accepted()).toBeGreaterThan(0);
    // A probe that waited in (or filled) the pool would starve order creation.
    expect({ total: pool.totalCount, waiting: pool.waitingCount }).toEqual({ total: 0, waiting: 0 });
  });

  it('Postgres refusing connections: 503', async () => {
    const pool = createPool(`postgres://postgres@127.0.0.1:${await freePort()}/onceflow`, { max: 3 });
    closers.push(() => pool.end());
    const { url } = await app(pool);
    const a = await readyz(url);
    expect(a.status).toBe(503);
    expect(a.body.checks).toEqual({ postgres: 'unavailable', temporal: 'ok' });
  });
});
