/** Helpers shared by the ledger tests: per-test tables and scopes, lock-wait and lease probes. */
import pg from 'pg';
import type {
  Json,
  Ledger,
  LedgerEvent,
  OperationRecord,
  Pool,
  PoolClient,
  ReconcileContext,
  ReconcileOutcome,
  Scope,
} from '../../src/index.ts';
import { testPool, uniq } from './env.ts';
import { until } from './wait.ts';

/** A pool whose connections carry a unique application_name, so tests can find their own backends. */
export function namedPool(max: number): { pool: Pool; appName: string } {
  const appName = uniq('ledger').slice(0, 60);
  return { pool: testPool(max, appName), appName };
}

/** A table name no other test uses (tables are created by tests, never by migrations). */
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

/** Waits until the record's lease has expired by the database clock. */
export async function untilLeaseExpired(pool: Pool, scope: Scope): Promise<void> {
  await until(`the lease of ${scope.key} to expire by the database clock`, async () => {
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

/**
 * A per-file business table (tenant_id, key, label) for local-mode tests:
 * what a body writes, and whether it survived its transaction or statement.
 */
export function businessTable(prefix: string): {
  name: string;
  create(pool: Pool): Promise<void>;
  drop(pool: Pool): Promise<void>;
  /** The labels written under the scope's tenant and key, in insertion order. */
  rows(pool: Pool, scope: Scope): Promise<string[]>;
} {
  const name = tableName(prefix);
  return {
    name,
    async create(pool) {
      await pool.query(
        `create table ${name} (tenant_id text not null, key text not null, label text not null, id serial primary key)`,
      );
    },
    async drop(pool) {
      await pool.query(`drop table if exists ${name}`);
    },
    async rows(pool, scope) {
      const { rows } = await pool.query<{ label: string }>(
        `select label from ${name} where tenant_id = $1 and key = $2 order by id`,
        [scope.tenantId, scope.key],
      );
      return rows.map((r) => r.label);
    },
  };
}

/** Reconciles an unresolved record and returns only the record afterwards (what these tests check). */
export async function reconcileOnly<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  reconcile: (ctx: ReconcileContext) => Promise<ReconcileOutcome<T>>,
): Promise<OperationRecord> {
  return (await ledger.reconcileUnresolved(scope, reconcile)).record;
}

/**
 * `statementsOf(run)`: the statements sent on `pool`'s clients while `run` runs (names of prepared
 * ones, else the text), to tell the paths apart by what reaches Postgres. `poolOf` is read per call.
 */
export function statementRecorder(poolOf: () => Pool): (run: () => Promise<unknown>) => Promise<string[]> {
  let recording: string[] | null = null;
  const watched = new WeakSet<PoolClient>();
  const watch = (client: PoolClient) => {
    if (watched.has(client)) return;
    watched.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((config: unknown, ...rest: unknown[]) => {
      const c = config as { name?: string; text?: string } | string;
      recording?.push(typeof c === 'string' ? c : (c.name ?? c.text ?? '?'));
      return query(config, ...rest);
    }) as PoolClient['query'];
  };
  return async (run) => {
    const sent: string[] = [];
    recording = sent;
    const pool = poolOf();
    pool.on('acquire', watch);
    try {
      await run();
    } finally {
      pool.off('acquire', watch);
      recording = null;
    }
    return sent;
  };
}
