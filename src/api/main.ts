/**
 * API composition root: config -> pool -> ledger -> Temporal client -> HTTP
 * server -> outbox relay. SIGTERM/SIGINT close them in reverse order (the
 * HTTP server before the relay, since a finishing request may still hand the
 * relay a workflow to start).
 *
 * The Temporal connection is lazy: orders are accepted (and their start
 * intents committed) even while Temporal is unreachable; the outbox relay
 * starts their workflows once it is back, and /readyz reports the outage.
 */
import { Client, Connection } from '@temporalio/client';
import { loadConfig, requireCredentials } from '../config.ts';
import { createPool } from '../db/index.ts';
import { assertNoDemoKeys } from '../db/seed.ts';
import { PortInUseError } from '../devserver/ports.ts';
import { Ledger } from '../ledger/index.ts';
import { errorFields, log, setLogLevel } from '../log.ts';
import { connectionSettings } from '../temporal/connection.ts';
import { OutboxRelay } from './outbox.ts';
import { buildApiServer } from './server.ts';
import { createMetrics } from '../metrics/index.ts';
import { listParkedWorkflows } from '../orders/attention.ts';

const config = loadConfig();
setLogLevel(config.logLevel);
// Off loopback, published default credentials stop the API here, with the variable to set.
try {
  requireCredentials(config, ['adminToken', 'webhookSecret']);
} catch (err) {
  log.error('api refuses to start', errorFields(err));
  process.exit(1);
}
const address = config.temporal.address ?? `127.0.0.1:${config.ports.temporal}`;

const pool = createPool(config.databaseUrl, { max: 20 });
const connection = Connection.lazy(connectionSettings(address));
const temporal = new Client({ connection, namespace: config.temporal.namespace });
const metrics = createMetrics({
  pool,
  // Under --api-processes, which process answered (they share the port): see src/api/cluster.ts.
  defaultLabels: { service: 'api', ...(config.processName ? { process: config.processName } : {}) },
  // Orders whose workflow parked without recording it on the row are counted too.
  parkedWorkflowIds: async () =>
    (await listParkedWorkflows(temporal, { limit: 1000 })).map((p) => p.workflowId),
});
const ledger = new Ledger(pool, { leaseMs: config.ledgerLeaseMs, hooks: metrics.ledgerHooks });
const relay = new OutboxRelay({
  pool,
  temporal,
  enabled: config.api.outboxRelay,
  pollMs: config.api.outboxPollMs,
});
const app = await buildApiServer({ pool, ledger, temporal, config, relay, metrics });

try {
  await assertNoDemoKeys(pool, config.bindHost);
  await app.listen({ host: config.bindHost, port: config.ports.api });
} catch (err) {
  const code = (err as NodeJS.ErrnoException).code;
  const failure =
    code === 'EADDRINUSE' || code === 'EACCES' ? new PortInUseError(config.ports.api, 'API (API_PORT)') : err;
  // (A ConfigError from assertNoDemoKeys lands here too: logged with its message, exit 1.)
  log.error('api failed to start', errorFields(failure));
  await app.close().catch(() => undefined);
  await connection.close().catch(() => undefined);
  await pool.end().catch(() => undefined);
  process.exit(1);
}
relay.start();
log.info('api listening', {
  url: `http://${config.bindHost}:${config.ports.api}`,
  temporal: address,
  taskQueue: config.temporal.taskQueue,
  outboxRelay: config.api.outboxRelay ? 'on' : 'off',
});

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info('api stopping', { signal });
  try {
    // HTTP first (in-flight requests may still kick the relay), then the relay and its in-flight starts.
    await app.close();
    await relay.stop();
    await connection.close();
    await pool.end();
    log.info('api stopped');
    process.exit(0);
  } catch (err) {
    log.error('api shutdown failed', errorFields(err));
    process.exit(1);
  }
}
process.once('SIGTERM', () => void shutdown('SIGTERM'));
process.once('SIGINT', () => void shutdown('SIGINT'));
