/**
 * The ledger's database access: one checked-out client per unit of work,
 * transactions with BEGIN/COMMIT/ROLLBACK on it, and the one bounded retry
 * for transient conflicts. `onceflow/postgres` (postgres.ts) publishes what an
 * application needs of it; the rest is internal to the package.
 */
import pg from 'pg';

/** The node-postgres pool the ledger and the helpers run on. */
export type Pool = pg.Pool;
/** A client checked out of a {@link Pool}. */
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

function sqlState(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err
    ? String((err as { code: unknown }).code)
    : undefined;
}

/** True when `err` is a Postgres error with this SQLSTATE code (see {@link SQLSTATE}). */
export function isSqlState(err: unknown, code: string): boolean {
  return sqlState(err) === code;
}

/** Serialization failures and deadlocks mean "run the transaction again", not "wrong". */
export function isTransientConflict(err: unknown): boolean {
  const state = sqlState(err);
  return state === SQLSTATE.serializationFailure || state === SQLSTATE.deadlockDetected;
}

/** How often a transaction that lost to a transient conflict is run again (withTransaction's default). */
export const TRANSACTION_RETRIES = 3;

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

/**
 * Sends several statements in one network write (pg's pipeline mode, on for this client only while
 * they are in flight). Each keeps its own Sync, so they run as if sent separately: an error does
 * not skip the next (inside a transaction the next fails with 25P02; a COMMIT there rolls back).
 */
export async function pipelined<T extends readonly unknown[]>(
  client: Queryable,
  send: () => { readonly [K in keyof T]: Promise<T[K]> },
): Promise<{ -readonly [K in keyof T]: PromiseSettledResult<T[K]> }> {
  // pg reads this field at every send, so it can be set per client (its typings say read-only).
  const mode = client as unknown as { pipeline?: boolean };
  if (typeof mode.pipeline !== 'boolean' || mode.pipeline) {
    // Not a node-postgres client (or one that pipelines anyway): plain sends, same results.
    return Promise.allSettled(send()) as never;
  }
  mode.pipeline = true;
  try {
    return (await Promise.allSettled(inOneWrite(client, send))) as never;
  } finally {
    // Every statement has answered, so nothing left on the wire confuses the non-pipelined mode.
    mode.pipeline = false;
  }
}

/**
 * The one retry loop for database work that may be run again as a whole: a
 * transaction that lost a serialization race or a deadlock, or a ledger
 * step whose record changed between two of its statements.
 */
export interface RetryPolicy {
  /** Runs after the first, at most; so at most `retries + 1` attempts in all. */
  retries: number;
  /** True for an error that means "run it again", not "wrong". Any other error surfaces at once. */
  retryable(err: unknown): boolean;
}

/** A capped exponential backoff. */
export interface Backoff {
  /** The delay before the first retry, in ms. */
  initialMs: number;
  /** The delay doubles with each retry, up to this. */
  maxMs: number;
  /**
   * The random fraction of each delay, taken off its top: 0 none, 0.5 "equal jitter" (the upper
   * half), 1 "full jitter" (anywhere from 0). Callers that failed together then retry apart.
   */
  jitter: number;
}

/**
 * The delay before retry number `retry` (0 for the first): `initialMs * 2^retry`, capped at
 * `maxMs`, less up to `jitter` of it. Never above `maxMs`.
 */
export function backoffMs(backoff: Backoff, retry: number, random: () => number = Math.random): number {
  const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(Math.max(0, retry), 30));
  return Math.round(ceiling * (1 - backoff.jitter * random()));
}

/**
 * withRetry's backoff: 10-20 ms, 20-40 ms, 40-80 ms, ... so that the transactions that just
 * collided do not collide again in lockstep. With 3 retries a step waits at most 140 ms in all.
 */
const RETRY_BACKOFF: Backoff = { initialMs: 20, maxMs: 1_000, jitter: 0.5 };

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `attempt` (passing its 0-based number) until it returns, an error the
 * policy does not retry is thrown (it surfaces unchanged, at once), or the
 * retries are used up (the last error surfaces unchanged). Each attempt must
 * leave nothing behind when it throws: the backoff starts only after it has
 * returned its connection. `wait` exists for tests that count the backoffs.
 */
export async function withRetry<T>(
  policy: RetryPolicy,
  attempt: (n: number) => Promise<T>,
  wait: (ms: number) => Promise<void> = sleep,
): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      if (n >= policy.retries || !policy.retryable(err)) throw err;
    }
    await wait(backoffMs(RETRY_BACKOFF, n));
  }
}
