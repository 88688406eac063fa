/** The app's tests' helpers around the core's ledger (the package's own tests have theirs). */
import type {
  Ledger,
  OperationRecord,
  Pool,
  ReconcileContext,
  ReconcileOutcome,
  Json,
  Scope,
} from 'onceflow';
import { createPool } from '../../src/db/index.ts';
import { testDatabaseUrl, uniq } from './env.ts';
import { until } from './wait.ts';

/** A pool whose connections carry a unique application_name, so tests can find their own backends. */
export function namedPool(max: number): { pool: Pool; appName: string } {
  const appName = uniq('ledger').slice(0, 60);
  return { pool: createPool(testDatabaseUrl(), { max, application_name: appName }), appName };
}

export function scopeFor(prefix: string, key = 'k1', operationType = 'test.op'): Scope {
  return { tenantId: uniq(prefix), operationType, key };
}

/** Waits until the claim's lease has run out by the database's clock (the only clock a takeover uses). */
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

/** Asks `reconcile` about an unresolved record without ever performing; the record afterwards. */
export async function reconcileOnly<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  reconcile: (ctx: ReconcileContext) => Promise<ReconcileOutcome<T>>,
): Promise<OperationRecord> {
  return (await ledger.reconcileUnresolved(scope, reconcile)).record;
}
