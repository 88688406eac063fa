/**
 * The one database module. All access goes through `withClient` or
 * `withTransaction`; never run a transaction through `pool.query`, because
 * consecutive `pool.query` calls may land on different connections. Both
 * are the core's (`onceflow/postgres`), the same code the ledger runs on;
 * the app adds its pool settings and its log lines.
 */
import pg from 'pg';
import { SQLSTATE } from 'onceflow/postgres';
import { errorFields, log } from '../log.ts';

export {
  withClient,
  withTransaction,
  isSqlState,
  SQLSTATE,
  type Pool,
  type PoolClient,
  type Queryable,
} from 'onceflow/postgres';

/**
 * How long a pool waits on Postgres (docs/DEPLOYING.md, "Postgres timeouts"). The defaults suit the
 * workers and the command lines; the API passes tighter ones (API_DB_*), so that while Postgres
 * cannot be reached every request that needs it fails within a few seconds.
 */
export interface PoolTimeouts {
  /** Opening a connection, and waiting for a free one when the pool is full (pg's connectionTimeoutMillis). */
  connectMs: number;
  /** Server-side statement_timeout: a slow statement is cancelled (57014) and its connection kept. */
  statementMs: number;
  /**
   * Client-side query_timeout: no answer at all within this (the server or the network is gone, so the
   * server-side timeout can't come back either). The connection is destroyed (see FailFastClient).
   */
  queryMs: number;
  /** idle_in_transaction_session_timeout: how long a transaction whose client went silent holds its rows. */
  idleInTransactionMs?: number;
}

const DEFAULT_POOL_TIMEOUTS: PoolTimeouts = {
  connectMs: 10_000,
  statementMs: 20_000,
  queryMs: 25_000,
};

/** TCP keepalive probes start after this much silence on a connection (idle in the pool or not). */
const KEEPALIVE_IDLE_MS = 10_000;

/** pg's options for `timeouts`. */
export function poolTimeoutOptions(timeouts: PoolTimeouts): Partial<pg.PoolConfig> {
  return {
    connectionTimeoutMillis: timeouts.connectMs,
    statement_timeout: timeouts.statementMs,
    query_timeout: timeouts.queryMs,
    ...(timeouts.idleInTransactionMs !== undefined
      ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionMs }
      : {}),
  };
}

const QUERY_READ_TIMEOUT = 'Query read timeout';

/**
 * pg's client, except that a query that timed out client-side (query_timeout) takes its connection
 * down at once. pg keeps such a connection open with the query still pending on it, so the next
 * statement there (the ROLLBACK after the failure, or the next caller's first query) would queue
 * behind it and wait out a timeout of its own. Destroyed, the ROLLBACK fails at once, Postgres
 * rolls back when it sees the socket close, and no transaction status is reported, so the core's
 * withClient / withTransaction discard the client instead of returning it to the pool.
 */
class FailFastClient extends pg.Client {
  #timedOut = false;

  constructor(config?: string | pg.ClientConfig) {
    super(config);
    const observe = (err: unknown) => {
      if (!(err instanceof Error) || err.message !== QUERY_READ_TIMEOUT || this.#timedOut) return;
      this.#timedOut = true;
      (this as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    };
    this.query = ((...args: unknown[]) => {
      const last = args.length - 1;
      const callback = args[last];
      if (typeof callback === 'function') {
        args[last] = (err: unknown, res: unknown) => {
          observe(err);
          (callback as (err: unknown, res: unknown) => void)(err, res);
        };
      }
      // pg's method as it is now, not as it was when this client was made (tests wrap it to observe).
      const result = (pg.Client.prototype.query as (...a: unknown[]) => unknown).apply(this, args);
      // Observed before the caller's own handler runs; the caller still gets the rejection.
      if (result instanceof Promise) result.catch(observe);
      return result;
    }) as pg.Client['query'];
  }

  override getTransactionStatus(): ReturnType<pg.Client['getTransactionStatus']> {
    return this.#timedOut ? null : super.getTransactionStatus();
  }
}

/** createPool's query_timeout when only statement_timeout is given: this much above it. */
const QUERY_TIMEOUT_MARGIN_MS = 5_000;

export function createPool(connectionString: string, options: Partial<pg.PoolConfig> = {}): pg.Pool {
  // The client-side bound is above the server-side one: a statement that is only slow is cancelled by
  // Postgres (57014) and keeps its connection; only a silent server or network meets query_timeout.
  // A pool without a statement_timeout gets none either (its statements may be meant to run long); a
  // pool whose sessions lift statement_timeout themselves must pass query_timeout: 0 (none).
  const statementMs = options.statement_timeout ?? DEFAULT_POOL_TIMEOUTS.statementMs;
  const queryMs =
    typeof statementMs === 'number' && statementMs > 0 ? statementMs + QUERY_TIMEOUT_MARGIN_MS : undefined;
  const pool = new pg.Pool({
    connectionString,
    max: 10,
    // Bounded waits: an activity attempt that Temporal has already timed out
    // must not commit minutes later, and a dead server must fail fast.
    connectionTimeoutMillis: DEFAULT_POOL_TIMEOUTS.connectMs,
    statement_timeout: statementMs,
    ...(queryMs !== undefined ? { query_timeout: queryMs } : {}),
    // A peer that vanished (host gone, a NAT or firewall dropped the flow) is found on idle connections
    // too, instead of by the first query after it.
    keepAlive: true,
    keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
    ...options,
    Client: FailFastClient,
  });
  // Every connection, idle or checked out, logs its own loss once (Postgres restarted,
  // pg_terminate_backend, a reset socket); withClient and the pool then discard it.
  pool.on('connect', (client) => {
    client.on('error', (err) => log.warn('postgres connection lost; it is discarded', pgErrorFields(err)));
  });
  // Without a listener, an idle client's error (reported again here) would crash the process.
  pool.on('error', () => undefined);
  return pool;
}

/** SQLSTATEs of a server that can't serve now: shutting down, starting, out of connections, cancelled. */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', SQLSTATE.queryCanceled]);

/** pg's and pg-pool's own errors for a connection that could not be made, was lost or stayed silent. */
const UNAVAILABLE_MESSAGES = new Set([
  'timeout exceeded when trying to connect',
  'Connection terminated due to connection timeout',
  'Connection terminated unexpectedly',
  'Connection terminated',
  'timeout expired',
  QUERY_READ_TIMEOUT,
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
]);

/** Socket errors: the server is not reachable (refused, reset, unroutable, unresolvable). */
const UNAVAILABLE_ERRNOS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  'ENOTFOUND',
]);

/**
 * True when `err` (or an error it wraps) says Postgres could not be reached or did not answer in
 * time: retrying later may succeed, and nothing about the request was wrong. Not for errors of the
 * request's own SQL (constraint violations, raised exceptions), which stay what they are.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (code.startsWith('08') && code.length === 5) return true;
      if (UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNOS.has(code)) return true;
    }
    if (UNAVAILABLE_MESSAGES.has(e.message)) return true;
  }
  return false;
}

function pgErrorFields(err: unknown): Record<string, unknown> {
  const code = (err as { code?: unknown } | null)?.code;
  return { ...errorFields(err), ...(code !== undefined ? { code: String(code) } : {}) };
}
