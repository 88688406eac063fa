/**
 * The database module under connection loss: a checked-out client whose
 * connection dies (pg_terminate_backend -> 57P01, what a Postgres restart
 * does) must not crash the process, and no connection in an unknown state
 * (inside a transaction, aborted, dead) ever goes back to the pool. Each test
 * uses a pool of one connection, so a poisoned connection would be the very
 * next one handed out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withClient, withTransaction, type Pool } from '../../src/db/index.ts';
import { ownDatabase, terminateConnections, testPool } from '../support/env.ts';

let db: Awaited<ReturnType<typeof ownDatabase>>;
const pools: Pool[] = [];
const onePool = () => {
  const pool = testPool(1, db.url);
  pools.push(pool);
  return pool;
};

beforeAll(async () => {
  db = await ownDatabase('dbloss');
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await db?.drop();
});

/** Resolves when `client`'s connection has closed (without listening for 'error' ourselves). */
const closed = (client: { once(e: 'end', cb: () => void): unknown }) =>
  new Promise<void>((resolve) => client.once('end', resolve));

describe('withClient / withTransaction under connection loss', () => {
  it('a connection killed while checked out and idle does not crash the process; the pool serves again', async () => {
    const pool = onePool();
    await withClient(pool, async (client) => {
      await client.query('select 1');
      const end = closed(client);
      // 57P01 arrives while no query runs: pg emits 'error' on the client itself.
      expect(await terminateConnections(db.name)).toBeGreaterThanOrEqual(1);
      await end;
    });
    const { rows } = await pool.query<{ ok: number }>('select 1 as ok');
    expect(rows).toEqual([{ ok: 1 }]);
  });

  it('a connection killed inside a transaction fails that transaction only', async () => {
    const pool = onePool();
    await expect(
      withTransaction(pool, async (tx) => {
        await tx.query('select 1');
        const end = closed(tx);
        await terminateConnections(db.name);
        await end;
        await tx.query('select 2');
      }),
    ).rejects.toThrow();
    expect(await withTransaction(pool, async (tx) => (await tx.query('select 3 as n')).rows)).toEqual([
      { n: 3 },
    ]);
  });

  it('a callback that leaves an aborted transaction behind does not poison the next caller (no 25P02)', async () => {
    const pool = onePool();
    await expect(
      withClient(pool, async (client) => {
        await client.query('begin');
        await client.query('select 1/0');
      }),
    ).rejects.toThrow(/division by zero/);
    expect((await pool.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]);
  });

  it('a callback that returns inside an open transaction does not hand it to the next caller', async () => {
    const pool = onePool();
    await withClient(pool, async (client) => {
      await client.query('begin');
      await client.query('create temp table leaked (x int)');
    });
    await withClient(pool, async (client) => {
      expect(client.getTransactionStatus()).toBe('I');
      expect((await client.query(`select to_regclass('pg_temp.leaked') as t`)).rows).toEqual([{ t: null }]);
    });
  });
});
