/**
 * createPool's client-side query timeout under a network partition (a TCP
 * proxy that stops forwarding, test/support/tcp-proxy.ts): a query that gets
 * no answer takes its connection down, so the ROLLBACK after it does not wait
 * out a second timeout, and the connection is never handed to the next caller
 * with the dead query still pending on it. And what the API maps to 503.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createPool,
  isDatabaseUnavailable,
  withClient,
  withTransaction,
  type Pool,
} from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.ts';
import { testDatabaseUrl, testPool } from '../support/env.ts';

const QUERY_TIMEOUT_MS = 2_000;

let proxy: TcpProxy;
const pools: Pool[] = [];

/** A pool of one connection through the proxy, with the given client-side bound. */
function proxiedPool(): Pool {
  const pool = createPool(proxy.via(testDatabaseUrl()), {
    max: 1,
    connectionTimeoutMillis: QUERY_TIMEOUT_MS,
    statement_timeout: QUERY_TIMEOUT_MS - 500,
    query_timeout: QUERY_TIMEOUT_MS,
  });
  pools.push(pool);
  return pool;
}

beforeAll(async () => {
  const target = new URL(testDatabaseUrl());
  proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
});
afterEach(() => proxy.heal());
afterAll(async () => {
  proxy?.heal();
  await Promise.all(pools.map((p) => p.end()));
  await proxy?.close();
});

describe('a query that gets no answer', () => {
  it('inside a transaction: fails after one timeout, not two (the ROLLBACK behind it fails at once)', async () => {
    const pool = proxiedPool();
    const started = performance.now();
    const failure = await withTransaction(pool, async (tx) => {
      await tx.query('select 1');
      proxy.blackhole();
      await tx.query('select 2');
    }).catch((err: unknown) => err);
    const elapsedMs = performance.now() - started;
    expect(failure).toBeInstanceOf(Error);
    expect((failure as Error).message).toBe('Query read timeout');
    expect(isDatabaseUnavailable(failure)).toBe(true);
    // A ROLLBACK queued behind the dead query would have waited a second QUERY_TIMEOUT_MS.
    expect(elapsedMs).toBeLessThan(2 * QUERY_TIMEOUT_MS);
    expect(pool.totalCount).toBe(0);
  });

  it('outside a transaction: the connection is discarded, not returned to the pool', async () => {
    const pool = proxiedPool();
    await withClient(pool, (c) => c.query('select 1'));
    expect({ total: pool.totalCount, idle: pool.idleCount }).toEqual({ total: 1, idle: 1 });
    proxy.blackhole();
    await expect(withClient(pool, (c) => c.query('select 2'))).rejects.toThrow('Query read timeout');
    // Its transaction status was 'I', yet the next caller must not get it with `select 2` pending.
    expect({ total: pool.totalCount, idle: pool.idleCount }).toEqual({ total: 0, idle: 0 });
    proxy.heal();
    expect((await withClient(pool, (c) => c.query<{ n: number }>('select 3 as n'))).rows).toEqual([{ n: 3 }]);
  });

  it('on pool.query: the connection is discarded too', async () => {
    const pool = proxiedPool();
    await pool.query('select 1');
    proxy.blackhole();
    await expect(pool.query('select 2')).rejects.toThrow('Query read timeout');
    expect(pool.totalCount).toBe(0);
  });
});

describe('isDatabaseUnavailable', () => {
  let direct: Pool;
  beforeAll(() => {
    direct = testPool(1);
    pools.push(direct);
  });

  it('a server nobody listens on, or a start-up that gets no answer: yes', async () => {
    const refused = createPool(`postgres://postgres@127.0.0.1:${await freePort()}/none`, { max: 1 });
    pools.push(refused);
    const err1 = await refused.query('select 1').catch((err: unknown) => err);
    expect(isDatabaseUnavailable(err1)).toBe(true);

    const pool = proxiedPool();
    proxy.blackhole();
    const err2 = await pool.query('select 1').catch((err: unknown) => err);
    expect(isDatabaseUnavailable(err2)).toBe(true);
  });

  it('a statement Postgres cancelled for running too long: yes; an error of the SQL itself: no', async () => {
    const slow = await withClient(direct, async (c) => {
      await c.query(`set statement_timeout = 100`);
      try {
        return await c.query('select pg_sleep(5)').catch((err: unknown) => err);
      } finally {
        await c.query('reset statement_timeout');
      }
    });
    expect((slow as { code?: string }).code).toBe('57014');
    expect(isDatabaseUnavailable(slow)).toBe(true);

    const wrong = await direct.query('select * from no_such_table').catch((err: unknown) => err);
    expect(isDatabaseUnavailable(wrong)).toBe(false);
    const raised = await direct
      .query(`do $$ begin raise exception 'injected'; end $$`)
      .catch((err: unknown) => err);
    expect(isDatabaseUnavailable(raised)).toBe(false);
    // Wrapped (an error's cause) counts as well.
    expect(isDatabaseUnavailable(new Error('outer', { cause: new Error('Query read timeout') }))).toBe(true);
  });
});
