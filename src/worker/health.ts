/**
 * The worker's health endpoints, served on its metrics port
 * (src/metrics/server.ts), for compose and orchestrators:
 *
 * - GET /healthz: the process is up (the listener answers). Never touches a
 *   dependency, so a Postgres outage does not get a healthy worker restarted.
 * - GET /readyz: the worker is polling (the SDK Worker's state is RUNNING) and
 *   Postgres answers `select 1` within a bound. 200 or 503, with each check's
 *   result as JSON. A worker held by the restore gate says so, with the
 *   command that clears it: that 503 body is what `npm start` shows when it
 *   gives up waiting.
 *
 * Unlike /metrics, neither renders the registry, whose collectors query
 * Postgres for gauges.
 */
import type { Worker } from '@temporalio/worker';
import type { Pool } from '../db/index.ts';
import { selectPendingRecovery } from '../recovery/sql.ts';

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
