/**
 * The one database module. All access goes through `withClient` or
 * `withTransaction`; never run a transaction through `pool.query`, because
 * consecutive `pool.query` calls may land on different connections. Both
 * are the core's (`onceflow/postgres`), the same code the ledger runs on;
 * the app adds its pool settings and its log lines.
 */
import pg from 'pg';
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
  // Every connection, idle or checked out, logs its own loss once (Postgres restarted,
  // pg_terminate_backend, a reset socket); withClient and the pool then discard it.
  pool.on('connect', (client) => {
    client.on('error', (err) => log.warn('postgres connection lost; it is discarded', pgErrorFields(err)));
  });
  // Without a listener, an idle client's error (reported again here) would crash the process.
  pool.on('error', () => undefined);
  return pool;
}

function pgErrorFields(err: unknown): Record<string, unknown> {
  const code = (err as { code?: unknown } | null)?.code;
  return { ...errorFields(err), ...(code !== undefined ? { code: String(code) } : {}) };
}
