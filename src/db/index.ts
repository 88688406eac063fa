/**
 * The one database module. All access goes through `withClient` or
 * `withTransaction`; never run a transaction through `pool.query`, because
 * consecutive `pool.query` calls may land on different connections.
 */
import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: a pool or a checked-out client inside a transaction. */
export type Queryable = Pick<pg.PoolClient, 'query'>;

/** SQLSTATE codes we act on, by name. */
export const SQLSTATE = {
  uniqueViolation: '23505',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  lockNotAvailable: '55P03',
  queryCanceled: '57014',
  invalidCatalogName: '3D000',
} as const;

export function createPool(connectionString: string, options: Partial<pg.PoolConfig> = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: 10,
    // Bounded waits: an activity attempt that Temporal has already timed out
    // must not commit minutes later, and a dead server must fail fast.
    connectionTimeoutMillis: 10_000,
    statement_timeout: 20_000,
    ...options,
  });
  // An idle client erroring (e.g. Postgres restarted) must not crash the process.
  pool.on('error', (err) => {
    console.error(JSON.stringify({ level: 'error', msg: 'idle postgres client error', error: err.message }));
  });
  return pool;
}

export async function withClient<T>(pool: pg.Pool, cb: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await cb(client);
  } finally {
    client.release();
  }
}

function sqlState(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err
    ? String((err as { code: unknown }).code)
    : undefined;
}

export function isSqlState(err: unknown, code: string): boolean {
  return sqlState(err) === code;
}

/**
 * BEGIN/COMMIT/ROLLBACK on one checked-out client. Serialization failures and
 * deadlocks are retried (bounded, with jitter): they mean "try again", not "wrong".
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  cb: (client: pg.PoolClient) => Promise<T>,
  { retries = 3 }: { retries?: number } = {},
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const client = await pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      const result = await cb(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      try {
        await client.query('ROLLBACK');
      } catch {
        broken = true; // the connection is unusable; don't return it to the pool
      }
      const state = sqlState(err);
      const retryable = state === SQLSTATE.serializationFailure || state === SQLSTATE.deadlockDetected;
      if (!retryable || attempt >= retries) throw err;
      await new Promise((r) => setTimeout(r, 10 * 2 ** attempt + Math.random() * 20));
    } finally {
      client.release(broken);
    }
  }
}
