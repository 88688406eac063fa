/**
 * Several API processes on one port (`npm start -- --api-processes M`). node:cluster, because on
 * Node 20 it is the one portable way (no SO_REUSEPORT on TCP servers). Each worker is a full API
 * process; several outbox relays are safe, since a row starts only under a claim. The primary
 * restarts a worker that exits, drains them all on SIGTERM, and serves every process's metrics.
 */
import cluster, { type Worker } from 'node:cluster';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { loadConfig } from '../config.ts';
import { errorFields, log, setLogLevel } from '../log.ts';
import { clusterCollector, startMetricsServer, type MetricsServer } from '../metrics/index.ts';
import { Supervisor } from '../process/supervisor.ts';

const config = loadConfig();
setLogLevel(config.logLevel);
const count = config.apiProcesses;

const STOP_TIMEOUT_MS = 20_000;

let stopping = false;
/** Every process has listened once: from then on an exit is restarted, before it is fatal. */
let started = false;
let listening = 0;
let metricsServer: MetricsServer | undefined;

// main.ts from the sources, main.js from the compiled build.
const self = fileURLToPath(import.meta.url);
const fromSources = self.endsWith('.ts');
cluster.setupPrimary({
  exec: path.join(path.dirname(self), fromSources ? 'main.ts' : 'main.js'),
  execArgv: fromSources ? ['--import', 'tsx'] : [],
});

/** The live cluster worker of each API process, for the metrics collector. */
const workers = new Map<string, Worker>();

/**
 * One supervisor per API process; during start-up a failure is fatal instead, since a restart loop would
 * hide it.
 */
const supervisors = Array.from({ length: count }, (_, i) => {
  const name = `api-${i + 1}`;
  const supervisor = new Supervisor({
    name,
    launch: () => {
      const worker = cluster.fork({
        ONCEFLOW_PROCESS: name,
        // The backlog gauges from api-1 only: one exporter per fact (METRICS_BACKLOG in config.ts).
        ...(i > 0 && !process.env.METRICS_BACKLOG ? { METRICS_BACKLOG: 'off' } : {}),
      });
      workers.set(name, worker);
      worker.once('exit', () => {
        if (workers.get(name) === worker) workers.delete(name);
      });
      return worker.process;
    },
    log: (message, fields, level) => log[level](message, fields),
    shouldRestart: () => {
      if (stopping) return false;
      if (started) return true;
      void stop('startup-failure', 1);
      return false;
    },
  });
  return supervisor;
});

async function stop(signal: string, exitCode = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info('api processes stopping', { signal });
  // SIGTERM, not worker.kill(): the API's own handler drains HTTP, then the relay.
  await Promise.all(supervisors.map((s) => s.stop(STOP_TIMEOUT_MS)));
  await metricsServer
    ?.close()
    .catch((err: unknown) => log.warn('metrics server close failed', errorFields(err)));
  log.info('api processes stopped');
  process.exit(exitCode);
}

process.once('SIGTERM', () => void stop('SIGTERM'));
process.once('SIGINT', () => void stop('SIGINT'));
process.on('uncaughtException', (err) => {
  log.error('api primary failed', errorFields(err));
  void stop('error', 1);
});

cluster.on('listening', () => {
  if (started || ++listening < count) return;
  started = true;
  log.info('api processes listening', { processes: count, port: config.ports.api });
  // `npm start` waits for this before it says the stack is up (see dev/start.ts).
  if (process.send) process.send({ type: 'api-processes-listening' });
});

// Before any process starts: a taken metrics port fails the start-up, as a taken API port does.
try {
  const registry = new Registry();
  registry.setDefaultLabels({ service: 'api' });
  metricsServer = await startMetricsServer({
    registry,
    host: config.metricsBindHost,
    port: config.ports.apiMetrics,
    what: 'API metrics (API_METRICS_PORT)',
    collect: clusterCollector({
      registry,
      workers: () => [...workers].map(([name, worker]) => ({ name, worker })),
    }),
  });
  log.info('api metrics listening', { url: metricsServer.url, processes: count });
} catch (err) {
  log.error('api metrics listener failed', errorFields(err));
  process.exit(1);
}

for (const supervisor of supervisors) void supervisor.start();
