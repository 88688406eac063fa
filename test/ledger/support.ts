/** Helpers shared by the ledger tests: deferred promises, per-test tables, lock-wait probes. */
import pg from 'pg';
import { createPool, type Pool } from '../../src/db/index.ts';
import { testDatabaseUrl, uniq } from '../support/env.ts';
import type { LedgerEvent, Scope } from '../../src/ledger/index.ts';

export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A pool whose connections carry a unique application_name, so tests can find their own backends. */
export function namedPool(max: number): { pool: Pool; appName: string } {
  const appName = uniq('ledger').slice(0, 60);
  return { pool: createPool(testDatabaseUrl(), { max, application_name: appName }), appName };
}

/** A table name no other test file uses (tables are created by tests, never by migrations). */
export function tableName(prefix: string): string {
  return pg.escapeIdentifier(
    uniq(prefix)
      .replace(/[^a-z0-9]/gi, '_')
      .toLowerCase(),
  );
}

export function scopeFor(prefix: string, key = 'k1', operationType = 'test.op'): Scope {
  return { tenantId: uniq(prefix), operationType, key };
}

/** Backends of `appName` currently blocked on a lock (e.g. behind an uncommitted claim). */
export async function lockWaiters(pool: Pool, appName: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where application_name = $1 and wait_event_type = 'Lock'`,
    [appName],
  );
  return rows[0]?.n ?? 0;
}

/** Waits for a condition that another connection will make true (polls; bounded). */
export async function until(
  what: string,
  check: () => Promise<boolean> | boolean,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits until the record's lease has expired by the database clock. */
export async function untilLeaseExpired(pool: Pool, scope: Scope): Promise<void> {
  await until('lease expiry', async () => {
    const { rows } = await pool.query<{ expired: boolean }>(
      `select lease_expires_at <= now() as expired from operations
        where tenant_id = $1 and operation_type = $2 and key = $3`,
      [scope.tenantId, scope.operationType, scope.key],
    );
    return rows[0]?.expired === true;
  });
}

export function eventLog(): {
  events: LedgerEvent[];
  onEvent(event: LedgerEvent): void;
  count(type: LedgerEvent['type']): number;
} {
  const events: LedgerEvent[] = [];
  return {
    events,
    onEvent: (event) => events.push(event),
    count: (type) => events.filter((e) => e.type === type).length,
  };
}
