/**
 * Several API processes on one port (`npm start -- --api-processes M`).
 *
 * Why node:cluster: on Node 20 it is the one portable way for several
 * processes to accept on one port. The primary owns the listening socket and
 * hands connections round-robin to its workers (Linux default scheduling),
 * so the port is bound once: no SO_REUSEPORT (which Node 20 cannot set on TCP
 * servers) and no proxy process of our own in front. Each worker is a full
 * API process (src/api/main.ts): its own pool, Temporal client and outbox
 * relay. Several relays are safe: a row is started only under a claim (one
 * atomic UPDATE ... SKIP LOCKED with a lease, claimDueOutbox in
 * src/outbox/sql.ts), and a
 * start is idempotent anyway (deterministic workflow ID, REJECT_DUPLICATE).
 *
 * This primary restarts a worker that exits on its own (capped exponential
 * backoff), and on SIGTERM/SIGINT asks every worker to drain (SIGTERM) and
 * exits once they all have. If the primary itself dies, Node exits its
 * workers (their IPC channel closes), and `npm start` restarts the primary.
 *
 * Each worker gets ONCEFLOW_PROCESS=api-<i>, which its metrics carry as the
 * `process` label. Metrics are not on the API port: this primary listens on
 * API_METRICS_PORT (METRICS_BIND_HOST, loopback by default) and answers each
 * scrape with every process's registry, gathered over the cluster's IPC
 * channel (src/metrics/cluster.ts), so one scrape sees them all.
 */
import cluster, { type Worker } from 'node:cluster';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { loadConfig } from '../config.ts';
import { errorFields, log, setLogLevel } from '../log.ts';
import { clusterCollector, startMetricsServer, type MetricsServer } from '../metrics/index.ts';

const config = loadConfig();
setLogLevel(config.logLevel);
const count = config.apiProcesses;

const RESTART_INITIAL_MS = 1_000;
const RESTART_MAX_MS = 30_000;
const RESTART_RESET_AFTER_MS = 60_000;
const STOP_TIMEOUT_MS = 20_000;

interface Slot {
  index: number;
  worker: Worker | undefined;
  startedAt: number;
  crashes: number;
  timer: NodeJS.Timeout | undefined;
}

let stopping = false;
/** Every process has listened once: from then on an exit is restarted, before it is fatal. */
let started = false;
let listening = 0;
let metricsServer: MetricsServer | undefined;
const slots: Slot[] = Array.from({ length: count }, (_, i) => ({
  index: i + 1,
  worker: undefined,
  startedAt: 0,
  crashes: 0,
  timer: undefined,
}));

cluster.setupPrimary({
  exec: path.join(path.dirname(fileURLToPath(import.meta.url)), 'main.ts'),
  execArgv: ['--import', 'tsx'],
});

function fork(slot: Slot): void {
  const worker = cluster.fork({ ONCEFLOW_PROCESS: `api-${slot.index}` });
  slot.worker = worker;
  slot.startedAt = Date.now();
  log.info('api process started', { process: `api-${slot.index}`, pid: worker.process.pid });
  worker.once('exit', (code, signal) => {
    if (slot.worker === worker) slot.worker = undefined;
    if (stopping) return;
    if (!started) {
      // During start-up a process that cannot listen (port taken, bad config)
      // fails them all: a restart loop would hide it. `npm start` reports it.
      log.error('an api process exited during start-up', {
        process: `api-${slot.index}`,
        exit: signal ? `signal ${signal}` : `exit code ${code}`,
      });
      void stop('startup-failure', 1);
      return;
    }
    slot.crashes = Date.now() - slot.startedAt >= RESTART_RESET_AFTER_MS ? 1 : slot.crashes + 1;
    const delay = Math.min(RESTART_MAX_MS, RESTART_INITIAL_MS * 2 ** (slot.crashes - 1));
    log.warn('api process exited unexpectedly; restarting it', {
      process: `api-${slot.index}`,
      exit: signal ? `signal ${signal}` : `exit code ${code}`,
      restartInMs: delay,
      restart: slot.crashes,
    });
    slot.timer = setTimeout(() => {
      slot.timer = undefined;
      if (!stopping) fork(slot);
    }, delay);
  });
}

async function stop(signal: string, exitCode = 0): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info('api processes stopping', { signal });
  const exits: Promise<void>[] = [];
  for (const slot of slots) {
    clearTimeout(slot.timer);
    const worker = slot.worker;
    if (!worker || worker.isDead()) continue;
    exits.push(
      new Promise<void>((resolve) => {
        const kill = setTimeout(() => worker.process.kill('SIGKILL'), STOP_TIMEOUT_MS);
        worker.once('exit', () => {
          clearTimeout(kill);
          resolve();
        });
        // SIGTERM, not worker.kill(): the API's own handler drains HTTP, then the relay.
        worker.process.kill('SIGTERM');
      }),
    );
  }
  await Promise.all(exits);
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
      workers: () => slots.flatMap((s) => (s.worker ? [{ name: `api-${s.index}`, worker: s.worker }] : [])),
    }),
  });
  log.info('api metrics listening', { url: metricsServer.url, processes: count });
} catch (err) {
  log.error('api metrics listener failed', errorFields(err));
  process.exit(1);
}

for (const slot of slots) fork(slot);
