/**
 * The API as it runs, wired once, so main.ts, the client generator and the wiring test see the same routes.
 */
import type { Client } from '@temporalio/client';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.ts';
import type { Pool } from '../db/index.ts';
import type { Ledger } from 'onceflow';
import { metricsPlugin, type Metrics } from '../metrics/index.ts';
import { Operator, opsRoutes } from '../operator/index.ts';
import { configuredProviders } from '../process/wiring.ts';
import { registerConsole } from '../console/routes.ts';
import { buildApiApp } from './app.ts';
import type { OutboxRelay } from './outbox.ts';

export interface ApiServerDeps {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  config: Config;
  /** Defaults to an unstarted relay built from `config` (see buildApiApp). */
  relay?: OutboxRelay;
  /** When given, every response is counted in it. */
  metrics?: Metrics;
}

/** The deadline of each Temporal call an admin route makes. */
const ADMIN_TEMPORAL_DEADLINE_MS = 3_000;

export async function buildApiServer(deps: ApiServerDeps): Promise<FastifyInstance> {
  const { pool, ledger, temporal, config } = deps;
  const operator = new Operator({
    pool,
    ledger,
    temporal,
    ...configuredProviders(config),
    temporalUi: { url: config.temporal.uiUrl, namespace: config.temporal.namespace },
    source: 'api',
    // An admin request's Temporal call (a signal, a re-drive, the parked list) answers within seconds:
    // a deadline exceeded or an unreachable server is a 503, as for Postgres.
    temporalTimeoutMs: ADMIN_TEMPORAL_DEADLINE_MS,
  });
  const app = await buildApiApp({ pool, ledger, temporal, config, relay: deps.relay });
  if (deps.metrics) await app.register(metricsPlugin({ metrics: deps.metrics }));
  await app.register(
    opsRoutes({
      operator,
      adminToken: config.adminToken,
      operators: pool,
      authFailure: { max: config.api.adminAuthFailureMax, windowMs: config.api.adminAuthFailureWindowMs },
      webhooks: { pool, taskQueue: config.temporal.taskQueue },
    }),
  );
  if (config.api.console) registerConsole(app);
  return app;
}
