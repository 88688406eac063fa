/**
 * The one database module. All access goes through `withClient` or
 * `withTransaction`; never run a transaction through `pool.query`, because
 * consecutive `pool.query` calls may land on different connections.
 */
import pg from 'pg';
import { errorFields, log } from '../log.ts';
import { withRetry } from './retry.ts';

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
    log.warn('idle postgres connection lost; the pool discards it', pgErrorFields(err));
  });
  return pool;
}

/**
 * A checked-out client's connection can fail while no query of ours is
 * running on it (Postgres restarted, pg_terminate_backend -> 57P01, a reset
 * socket). pg then emits 'error' on the client, and an 'error' event with no
 * listener kills the process. The pool listens only while a client is idle in
 * the pool, so every checkout listens here for its whole lifetime and
 * remembers the failure, so the client is discarded rather than reused.
 */
interface Checkout {
  client: pg.PoolClient;
  /** Returns the client: discarded if it failed or is not idle outside a transaction. */
  release(cause?: unknown): void;
}

async function checkout(pool: pg.Pool): Promise<Checkout> {
  /** Set when the connection failed while checked out. */
  let failure: Error | undefined;
  const onError = (err: Error) => {
    failure = err;
    log.warn('postgres connection lost while checked out; it will be discarded', pgErrorFields(err));
  };
  // The callback form, not `await pool.connect()`: the listener must be on
  // the client in the same tick the pool hands it over. The pool removes its
  // own listener at hand-over, and a promise resumes only after the current
  // socket chunk is parsed, which may hold this connection's 57P01 right
  // after the previous user's last reply: an 'error' with no listener.
  const client = await new Promise<pg.PoolClient>((resolve, reject) => {
    pool.connect((err, c) => {
      if (err || !c) {
        reject(err ?? new Error('pool returned no client'));
        return;
      }
      c.on('error', onError);
      resolve(c);
    });
  });
  return {
    client,
    release(cause) {
      client.removeListener('error', onError);
      // 'I' = idle outside a transaction. Anything else ('T' in a transaction,
      // 'E' in a failed one, null unknown) would hand the next caller an open
      // or aborted transaction (25P02 on every statement), so the connection
      // is destroyed instead of reused.
      if (failure === undefined && client.getTransactionStatus() === 'I') {
        client.release();
        return;
      }
      const reason =
        failure ??
        (cause instanceof Error ? cause : new Error('connection left inside a transaction; discarded'));
      client.release(reason);
    },
  };
}

/**
 * Runs `cb` on one checked-out client. The client goes back to the pool only
 * if it is healthy and idle outside a transaction; otherwise it is discarded.
 */
export async function withClient<T>(pool: pg.Pool, cb: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const co = await checkout(pool);
  let cause: unknown;
  try {
    return await cb(co.client);
  } catch (err) {
    cause = err;
    throw err;
  } finally {
    co.release(cause);
  }
}

function pgErrorFields(err: unknown): Record<string, unknown> {
  const code = sqlState(err);
  return { ...errorFields(err), ...(code ? { code } : {}) };
}

function sqlState(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err
    ? String((err as { code: unknown }).code)
    : undefined;
}

export function isSqlState(err: unknown, code: string): boolean {
  return sqlState(err) === code;
}

/** Serialization failures and deadlocks mean "run the transaction again", not "wrong". */
function isTransientConflict(err: unknown): boolean {
  const state = sqlState(err);
  return state === SQLSTATE.serializationFailure || state === SQLSTATE.deadlockDetected;
}

/** How often a transaction that lost to a transient conflict is run again (withTransaction's default). */
const TRANSACTION_RETRIES = 3;

/**
 * BEGIN/COMMIT/ROLLBACK on one checked-out client. Transient conflicts
 * (isTransientConflict) are retried: `retries` times (default
 * TRANSACTION_RETRIES), with the shared backoff of withRetry.
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  cb: (client: pg.PoolClient) => Promise<T>,
  { retries = TRANSACTION_RETRIES }: { retries?: number } = {},
): Promise<T> {
  return withRetry({ retries, retryable: isTransientConflict }, async () => {
    const co = await checkout(pool);
    const client = co.client;
    let cause: unknown;
    // The client goes back (or is discarded) here, before withRetry's backoff, not after it.
    try {
      await client.query('BEGIN');
      const result = await cb(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      cause = err;
      // A failed ROLLBACK means a dead connection; release() then discards it.
      // It must not mask the real error.
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      co.release(cause);
    }
  });
}

/**
 * Runs `send`, which issues several statements on one node-postgres client
 * in pipeline mode, with the connection's socket corked, so they leave in one
 * `writev` instead of one write (a system call, and on loopback the whole
 * delivery) each. node-postgres writes every statement as soon as it is
 * issued; corking only makes Node hold them until `send` returns. Anything
 * that is not such a client (no socket to cork) is sent as before.
 */
export function inOneWrite<T>(client: Queryable, send: () => T): T {
  const stream = (client as unknown as { connection?: { stream?: { cork?(): void; uncork?(): void } } })
    .connection?.stream;
  if (typeof stream?.cork !== 'function' || typeof stream.uncork !== 'function') return send();
  stream.cork();
  try {
    return send();
  } finally {
    stream.uncork();
  }
}
