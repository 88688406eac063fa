/** The run's database (test/setup/global.ts) and unique names for the package's tests. */
import { inject } from 'vitest';
import pg from 'pg';

/** The run's migrated database, shared by every file: pass it to spawned processes. */
export const testDatabaseUrl = (): string => inject('onceflowDatabaseUrl');

/**
 * A pool on the run's database. Bounded waits, as a user's pool should have:
 * a test stuck on a lock fails instead of hanging the run.
 */
export function testPool(max = 10, applicationName?: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: testDatabaseUrl(),
    max,
    connectionTimeoutMillis: 10_000,
    statement_timeout: 20_000,
    ...(applicationName ? { application_name: applicationName } : {}),
  });
  // An idle connection dropped by the server must not crash the test process.
  pool.on('error', () => undefined);
  return pool;
}

/** A unique name for this test: files share one database, so keys, tenants and tables must never collide. */
export function uniq(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
