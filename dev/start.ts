/**
 * README command 1: the whole system on one machine.
 *
 *   Temporal dev server (unless TEMPORAL_ADDRESS is set)
 *   -> Postgres checked and migrated
 *   -> sandbox providers, worker, API (each its own process)
 *
 * Every port is checked before anything starts, so a second copy fails fast
 * with a clear message. Once up, a child that exits on its own is restarted
 * (capped exponential backoff). SIGINT/SIGTERM stop the children in reverse
 * order and then the Temporal server; nothing is left running.
 */
import { localMail } from './mail/local.ts';
import path from 'node:path';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfig, requireCredentials } from '../src/config.ts';
import { createPool } from '../src/db/index.ts';
import { ensureDatabase, migrate, redactUrl, withDatabase } from '../src/db/migrate.ts';
import { seedDemoData } from './seed.ts';
import { ensureTemporalCli, startDevServer, waitForTemporal, type DevServer } from './devserver/temporal.ts';
import { waitForHttp } from './wait.ts';
import { assertPortFree, PortInUseError } from '../src/process/ports.ts';
import { Supervisor } from '../src/process/supervisor.ts';
import {
  derivedServerPorts,
  describeServerPorts,
  ensureTemporalServerTools,
  startTemporalServer,
} from './devserver/temporal-server.ts';
import { Client, Connection } from '@temporalio/client';
import { connectionSettings } from '../src/temporal/connection.ts';
import { createCommand, parseCli, positiveInt } from '../src/cli/command.ts';
import { embeddedPostgresIfNeeded } from './postgres/embedded.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// No DATABASE_URL and no Postgres on 127.0.0.1:5432: an embedded one under .data/ (sets DATABASE_URL).
const embeddedPostgres = await embeddedPostgresIfNeeded(root, (line) => process.stdout.write(`${line}\n`));
const config = loadConfig(process.env, root);
const program = createCommand(
  'start',
  'Run the whole onceflow stack on this machine (Temporal, Postgres checks, sandbox, workers, API).',
)
  .option('--workers <n>', 'worker processes (env WORKERS)', positiveInt, config.workers)
  .option(
    '--api-processes <n>',
    'API processes sharing API_PORT (env API_PROCESSES)',
    positiveInt,
    config.apiProcesses,
  )
  .option(
    '--join',
    "join a stack that is already running (another checkout's npm start, at TEMPORAL_ADDRESS): " +
      'migrate, then start only the workers, e.g. the next release beside the running one (docs/UPGRADING.md)',
  )
  .addHelpText(
    'after',
    '\nRun as: npm start -- [options]. Ports and the rest come from the environment (README).',
  );
parseCli(program);
const counts = program.opts<{ workers: number; apiProcesses: number; join?: boolean }>();
const say = (line: string) => process.stdout.write(`[onceflow] ${line}\n`);

/**
 * Supervision (src/process/supervisor.ts): once the stack is up, a child that
 * exits on its own (a crash, an unhandled error, kill -9) is started again
 * after a capped exponential backoff, with a log line naming it and its exit
 * code. During startup a child's exit is fatal instead: a broken setup (a port
 * taken, a bad DATABASE_URL) must fail fast, not loop. Each child has a
 * process group of its own, so Ctrl-C reaches only this process, which stops
 * the children in reverse order.
 */
const services: Supervisor[] = [];

/** Worker i (from 0): its name and its two metrics ports, 2i above the configured ones. */
const workerSlots = Array.from({ length: counts.workers }, (_, index) => ({
  index,
  name: counts.workers > 1 ? `worker-${index + 1}` : 'worker',
  metricsPort: config.ports.workerMetrics + 2 * index,
  sdkMetricsPort: config.ports.workerSdkMetrics + 2 * index,
}));
let devServer: DevServer | undefined;
let stopping = false;
let supervising = false;

/** Starts `entry` under supervision; its output lines are prefixed with [name]. */
function startService(
  name: string,
  entry: string,
  env: NodeJS.ProcessEnv,
  onMessage?: (message: unknown) => void,
): Supervisor {
  const service = new Supervisor({
    name,
    args: ['--import', 'tsx', path.join(root, entry)],
    cwd: root,
    env,
    ...(onMessage ? { onMessage } : {}),
    onLine: (line) => process.stdout.write(`[${name}] ${line}\n`),
    log: (message) => say(message),
    shouldRestart: () => {
      if (stopping) return false;
      if (supervising) return true;
      say(`${name} exited during start-up; stopping everything.`);
      void shutdown(1);
      return false;
    },
  });
  services.push(service);
  // No ready hook: main() waits for each service its own way (a health URL, the self-check).
  void service.start();
  return service;
}

async function shutdown(code: number): Promise<never> {
  if (stopping) return new Promise<never>(() => undefined);
  stopping = true;
  say('stopping...');
  for (const service of [...services].reverse()) await service.stop(20_000);
  if (devServer) {
    say(`stopping the Temporal ${config.temporal.backend === 'postgres' ? 'server' : 'dev server'}...`);
    await devServer.stop();
  }
  if (embeddedPostgres) {
    say('stopping the embedded Postgres...');
    await embeddedPostgres.stop();
  }
  say('stopped.');
  process.exit(code);
}

process.on('SIGINT', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));
// A closed terminal: the children are in process groups of their own and never see its SIGHUP.
process.on('SIGHUP', () => void shutdown(0));

async function main(): Promise<void> {
  // 0. Off loopback, the published local credentials are refused: say so before starting anything.
  requireCredentials(config, ['adminToken', 'webhookSecret']);

  // 1. Ports first: fail fast, never hang, if another stack (or anything) holds one.
  const ports: [number, string][] = [
    [config.ports.api, 'API (API_PORT)'],
    [config.ports.apiMetrics, 'API metrics (API_METRICS_PORT)'],
    [config.ports.sandbox, 'sandbox providers (SANDBOX_PORT)'],
  ];
  ports.push(...workerPorts());
  const serverPorts =
    config.temporal.backend === 'postgres'
      ? derivedServerPorts(config.ports.temporal, config.ports.temporalUi)
      : undefined;
  if (!config.temporal.external && serverPorts) {
    ports.push(...describeServerPorts(serverPorts));
  } else if (!config.temporal.external) {
    ports.push([config.ports.temporal, 'Temporal frontend (TEMPORAL_PORT)']);
    ports.push([config.ports.temporalUi, 'Temporal UI (TEMPORAL_UI_PORT)']);
  }
  const clash = ports.find(([port], i) => ports.findIndex(([other]) => other === port) !== i);
  if (clash) {
    throw new Error(
      `port ${clash[0]} is asked for twice (${ports
        .filter(([p]) => p === clash[0])
        .map(([, what]) => what)
        .join(' and ')}); set the ports further apart`,
    );
  }
  for (const [port, what] of ports) await assertPortFree(port, what);

  // 2. Postgres.
  say(`checking Postgres at ${redactUrl(config.databaseUrl)}...`);
  await ensureDatabase(config.databaseUrl);
  const applied = await migrate(config.databaseUrl, (m) => say(m));
  say(applied.length ? `applied migrations: ${applied.join(', ')}` : 'database schema is up to date');
  // Demo tenants and their published keys: local runs only (dev/seed.ts).
  if (!config.exposure.exposed) {
    const pool = createPool(config.databaseUrl, { max: 1 });
    try {
      const added = await seedDemoData(pool, config.exposure);
      if (added.length) say(`seeded demo API keys (local only): ${added.join(', ')}`);
    } finally {
      await pool.end();
    }
  } else {
    say(
      `demo API keys are not seeded (${config.exposure.reasons.join('; ')}); create keys with npm run api-key`,
    );
  }

  // 3. Temporal.
  let temporalAddress = config.temporal.address;
  let uiUrl = config.temporal.uiUrl;
  if (config.temporal.external) {
    say(`using the Temporal server at ${temporalAddress} (TEMPORAL_ADDRESS)`);
    await waitForTemporal(temporalAddress, 60_000, undefined, say, undefined, config.temporal.namespace);
  } else if (serverPorts) {
    const tools = await ensureTemporalServerTools({ toolsDir: config.toolsDir, log: say });
    const { postgres } = config.temporal;
    say(
      `starting the Temporal server on Postgres (${redactUrl(withDatabase(postgres.url, postgres.database))}, visibility: ${postgres.visibilityDatabase}; logs in ${config.dataDir})...`,
    );
    devServer = await startTemporalServer({
      tools,
      databases: {
        postgresUrl: postgres.url,
        database: postgres.database,
        visibilityDatabase: postgres.visibilityDatabase,
      },
      ports: serverPorts,
      dataDir: config.dataDir,
      namespace: config.temporal.namespace,
      log: say,
    });
    temporalAddress = devServer.address;
    uiUrl = devServer.uiUrl ?? uiUrl;
  } else {
    const cli = await ensureTemporalCli({ toolsDir: config.toolsDir, log: say });
    fs.mkdirSync(config.dataDir, { recursive: true });
    const logFile = path.join(config.dataDir, 'temporal.log');
    say(`starting the Temporal dev server (log: ${logFile})...`);
    devServer = await startDevServer({
      cli,
      port: config.ports.temporal,
      uiPort: config.ports.temporalUi,
      dbFile: path.join(config.dataDir, 'temporal.sqlite'),
      logFile,
      namespace: config.temporal.namespace,
      log: say,
    });
    temporalAddress = devServer.address;
    uiUrl = devServer.uiUrl ?? uiUrl;
  }

  // 4. Our processes, each with the same view of the world.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: temporalAddress,
    TEMPORAL_UI_URL: uiUrl,
    DATABASE_URL: config.databaseUrl,
    // The children write to a pipe (prefixed with [name] below): they log for humans when we do.
    LOG_PRETTY: (config.logPretty ?? process.stdout.isTTY === true) ? 'on' : 'off',
  };
  startService('sandbox', 'dev/sandbox/main.ts', env);
  await waitForHttp(`${config.sandboxUrl}/healthz`, 60_000);
  const mail = localMail(config, process.env); // EMAIL_PROVIDER=smtp without SMTP_URL
  if (mail) startService('mail', 'dev/mail/main.ts', env);
  if (mail) await waitForHttp(`${mail.mailboxUrl}/healthz`, 30_000);
  startWorkers(env);
  await workersReady();
  // Returns once a worker has run the smoke workflow: a worker is up and polling.
  await selfCheck(temporalAddress, uiUrl);
  if (counts.apiProcesses > 1) {
    say(`starting ${counts.apiProcesses} API processes on port ${config.ports.api} (node:cluster)`);
    // The port answers as soon as the first process listens; "up" waits for all of them, or
    // the first requests would all go to that one (the primary hands connections only to
    // processes that listen). The primary says so on its IPC channel.
    const waitMs = 60_000 * counts.apiProcesses;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(`the ${counts.apiProcesses} API processes did not all listen within ${waitMs} ms`),
          ),
        waitMs,
      );
      startService(
        'api',
        'src/api/cluster.ts',
        { ...env, API_PROCESSES: String(counts.apiProcesses) },
        (m) => {
          if ((m as { type?: unknown } | null)?.type !== 'api-processes-listening') return;
          clearTimeout(timer);
          resolve();
        },
      );
    });
  } else {
    startService('api', 'src/api/main.ts', env);
  }
  // M processes start at once and share the CPU: a minute each on a loaded machine.
  await waitForHttp(`http://127.0.0.1:${config.ports.api}/healthz`, 60_000 * counts.apiProcesses);

  const api = `http://127.0.0.1:${config.ports.api}`;
  // Metrics listen on METRICS_BIND_HOST (loopback unless set), never on the API port.
  const metricsHost = ['0.0.0.0', '::'].includes(config.metricsBindHost)
    ? '127.0.0.1'
    : config.metricsBindHost.includes(':')
      ? `[${config.metricsBindHost}]`
      : config.metricsBindHost;
  supervising = true;
  say('');
  say('onceflow is up. Ctrl-C stops everything; a process that exits on its own is restarted.');
  say(`  API                 ${api}  (OpenAPI: ${api}/openapi.json, docs: ${api}/docs)`);
  say(`  Temporal UI         ${uiUrl}/namespaces/${config.temporal.namespace}/workflows`);
  say(`  Temporal frontend   ${temporalAddress}`);
  say(`  Sandbox providers   ${config.sandboxUrl}  (audit: ${config.sandboxUrl}/_sandbox/charges)`);
  if (mail) say(`  Receipts (SMTP)     ${mail.mailboxUrl}/messages`);
  for (const w of workerSlots) {
    const label = counts.workers > 1 ? `Worker metrics (${w.index + 1})` : 'Worker metrics';
    say(`  ${label.padEnd(20)}http://${metricsHost}:${w.metricsPort}/metrics`);
  }
  const apiMetrics = `http://${metricsHost}:${config.ports.apiMetrics}/metrics`;
  say(
    counts.apiProcesses > 1
      ? `  API metrics         ${apiMetrics}  (every one of the ${counts.apiProcesses} processes in each scrape, label process="api-<i>")`
      : `  API metrics         ${apiMetrics}`,
  );
  say(`  Postgres            ${redactUrl(config.databaseUrl)}`);
  say('');
}

/** The worker slots' metrics ports, named for "port in use" messages. */
function workerPorts(): [number, string][] {
  return workerSlots.flatMap((w): [number, string][] => {
    const which = counts.workers > 1 ? `${w.name} ` : 'worker ';
    const plus = w.index ? ` + ${2 * w.index}` : '';
    return [
      [w.metricsPort, `${which}metrics (WORKER_METRICS_PORT${plus})`],
      [w.sdkMetricsPort, `${which}SDK metrics (WORKER_SDK_METRICS_PORT${plus})`],
    ];
  });
}

/**
 * The worker processes. Each polls as this checkout's Deployment Version (src/worker/deployment.ts:
 * ONCEFLOW_WORKER_BUILD_ID, or the package version and the workflow code's hash) and makes it
 * current when it is a new build, so the workers of another checkout (--join) run beside them.
 */
function startWorkers(env: NodeJS.ProcessEnv): void {
  for (const w of workerSlots) {
    startService(w.name, 'src/worker/main.ts', {
      ...env,
      WORKER_SMOKE_WORKFLOW: 'on', // the self-check runs the smoke workflow
      WORKER_METRICS_PORT: String(w.metricsPort),
      WORKER_SDK_METRICS_PORT: String(w.sdkMetricsPort),
      ...(counts.workers > 1 ? { ONCEFLOW_PROCESS: w.name } : {}),
    });
  }
}

/**
 * Waits for every worker's /readyz: polling, with its version settled (a new build made current,
 * src/worker/deployment.ts). Before that a run started now could be routed to the version that
 * was current before this one (a previous run's build, whose workers are gone).
 */
async function workersReady(): Promise<void> {
  const bind = config.metricsBindHost;
  const host = ['0.0.0.0', '::'].includes(bind) ? '127.0.0.1' : bind.includes(':') ? `[${bind}]` : bind;
  for (const w of workerSlots) await waitForHttp(`http://${host}:${w.metricsPort}/readyz`, 120_000);
}

/**
 * --join: this checkout's workers beside a running stack (its Temporal, Postgres, sandbox and API
 * belong to the `npm start` that runs them). Migrations first: the new release's, online-safe, run
 * while the old release keeps writing (docs/UPGRADING.md).
 */
async function join(): Promise<void> {
  for (const [port, what] of workerPorts()) await assertPortFree(port, what);
  const address = config.temporal.address;
  say(`joining the stack at ${address} (Postgres ${redactUrl(config.databaseUrl)})...`);
  await waitForTemporal(address, 60_000, undefined, say, undefined, config.temporal.namespace);
  const applied = await migrate(config.databaseUrl, (m) => say(m));
  say(applied.length ? `applied migrations: ${applied.join(', ')}` : 'database schema is up to date');
  startWorkers({
    ...process.env,
    TEMPORAL_ADDRESS: address,
    DATABASE_URL: config.databaseUrl,
    LOG_PRETTY: (config.logPretty ?? process.stdout.isTTY === true) ? 'on' : 'off',
  });
  // Then the smoke workflow runs on the deployment's current version: this checkout's, if it is new.
  await workersReady();
  await selfCheck(address, config.temporal.uiUrl);
  supervising = true;
  say('');
  say(`${counts.workers} worker${counts.workers > 1 ? 's' : ''} joined. Ctrl-C stops them (only them).`);
  for (const w of workerSlots) say(`  ${w.name.padEnd(20)}metrics on port ${w.metricsPort}`);
  say('');
}

/** Runs the smoke workflow once: proves Temporal -> worker -> Postgres end to end, and shows in the UI. */
async function selfCheck(address: string, uiUrl: string): Promise<void> {
  const connection = await Connection.connect(connectionSettings(address));
  try {
    const client = new Client({ connection, namespace: config.temporal.namespace });
    const workflowId = `smoke/startup-${new Date().toISOString()}`;
    const result = await client.workflow.execute('smokeWorkflow', {
      workflowId,
      taskQueue: config.temporal.taskQueue,
      args: [],
      workflowExecutionTimeout: '2 minutes',
    });
    say(`self-check passed: smoke workflow wrote ${JSON.stringify(result)}`);
    say(`  ${uiUrl}/namespaces/${config.temporal.namespace}/workflows/${encodeURIComponent(workflowId)}`);
  } finally {
    await connection.close();
  }
}

(counts.join ? join() : main()).catch(async (err: unknown) => {
  const message = err instanceof PortInUseError || err instanceof Error ? err.message : String(err);
  process.stderr.write(`[onceflow] cannot start: ${message}\n`);
  await shutdown(1);
});
