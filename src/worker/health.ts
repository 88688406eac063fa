/**
 * The worker's health endpoints, served on its metrics port
 * (src/metrics/server.ts), for compose and orchestrators:
 *
 * - GET /healthz: the process is up (the listener answers). Never touches a
 *   dependency, so a Postgres outage does not get a healthy worker restarted.
 * - GET /readyz: the worker is polling (the SDK Worker's state is RUNNING) and
 *   Postgres answers `select 1` within a bound. 200 or 503, with each check's
 *   result as JSON.
 *
 * Unlike /metrics, neither renders the registry, whose collectors query
 * Postgres for gauges.
 */
import type { Worker } from '@temporalio/worker';
import type { Pool } from '../db/index.ts';

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
  return async () => {
    const state = opts.worker()?.getState() ?? 'STARTING';
    let postgres = 'ok';
    try {
      await Promise.race([
        opts.pool.query('select 1'),
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs).unref(),
        ),
      ]);
    } catch (err) {
      postgres = err instanceof Error ? err.message : String(err);
    }
    return {
      ready: state === 'RUNNING' && postgres === 'ok',
      checks: { worker: state === 'RUNNING' ? 'polling' : state.toLowerCase(), postgres },
    };
  };
}
