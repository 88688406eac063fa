/**
 * The worker's health endpoints on its metrics port. /healthz touches no dependency, so a Postgres
 * outage does not get a healthy worker restarted. /readyz: polling and Postgres answers; a worker
 * held by the restore gate says so, with the command that clears it.
 */
import type { Worker } from '@temporalio/worker';
import type { Pool } from '../db/index.ts';
import { selectPendingRecovery } from '../restore/sql.ts';

export interface Readiness {
  ready: boolean;
  checks: { worker: string; postgres: string };
}

export function workerReadiness(opts: {
  /** The worker once created; undefined while the process is still starting. */
  worker: () => Pick<Worker, 'getState'> | undefined;
  pool: Pool;
  timeoutMs?: number;
}): () => Promise<Readiness> {
  const timeoutMs = opts.timeoutMs ?? 2_000;
  const bounded = <T>(query: Promise<T>): Promise<T> =>
    Promise.race([
      query,
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs).unref(),
      ),
    ]);
  return async () => {
    const state = opts.worker()?.getState() ?? 'STARTING';
    let postgres = 'ok';
    try {
      await bounded(opts.pool.query('select 1'));
    } catch (err) {
      postgres = err instanceof Error ? err.message : String(err);
    }
    let worker = state === 'RUNNING' ? 'polling' : state.toLowerCase();
    if (state === 'STARTING' && postgres === 'ok') {
      // Not polling yet: the restore gate may be why (src/recovery/gate.ts), and it does not open by itself.
      const pending = await bounded(selectPendingRecovery(opts.pool)).catch(() => null);
      if (pending) {
        worker =
          `restore recovery pending (${pending.declared_by}); run npx onceflow ops recover-after-restore ` +
          '--since <when the restored backup was taken> (docs/OPERATIONS.md, Backup and restore)';
      }
    }
    return { ready: state === 'RUNNING' && postgres === 'ok', checks: { worker, postgres } };
  };
}
