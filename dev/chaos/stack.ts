/**
 * The stack under test, as separate processes on free ports, configured the
 * way dev/start.ts configures a real deployment (environment variables read by
 * `loadConfig` in each process): a Temporal dev server of its own (headless,
 * its own SQLite file), the sandbox provider, TWO workers on one task queue,
 * and the API. Only the database differs: a throwaway one (see postgres.ts).
 * The API and the workers reach Postgres and Temporal through toxiproxy
 * (network.ts), where the network scenarios inject their faults; the
 * harness's own checks and the sandbox provider (an outside system) go direct.
 */
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { DEMO_TENANTS } from '../../src/api/demo-keys.ts';
import { freePort } from '../../src/process/ports.ts';
import { ensureTemporalCli, startDevServer, type DevServer } from '../devserver/temporal.ts';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';
import { ensureToxiproxy } from '../toxiproxy.ts';
import { ChaosNetwork } from './network.ts';
import { openChaosDatabase, type ChaosDatabase } from './postgres.ts';
import { httpOk } from '../wait.ts';
import { Supervised, waitUntil } from './processes.ts';
import { MerchantReceiver } from './merchant.ts';

const TASK_QUEUE = 'onceflow-chaos';
/** Strong enough for loadConfig's 128-bit floor on an explicit admin token; local to the chaos run. */
const ADMIN_TOKEN = '1e17c2cceb03b9142e5d14042d26747d1d15c0ad9941a4867374fa5a30015fcc';
/** The local demo key (src/api/demo-keys.ts), seeded into the harness's database: orders are placed as tenant `acme`. */
export const TENANT_API_KEY = DEMO_TENANTS[0].key;
export const TENANT_ID = DEMO_TENANTS[0].id;
/**
 * The merchant deliveries' first retry (default 5 s; doubling, with jitter, up to 1 h): short, so
 * that a delivery that met a fault is retried well within the catch-up bound (run.ts).
 */
const WEBHOOK_FIRST_RETRY_MS = 1_000;

export interface StackOptions {
  root: string;
  runDir: string;
  runId: string;
  sharedDatabaseUrl: string;
  toolsDir: string;
  sharedPostgres: boolean;
  /** Seed of toxiproxy's randomness (latency jitter). */
  seed?: number;
  log: (line: string) => void;
}

const READY_MS = 90_000;
/**
 * A worker is up once it polls, or once it waits at the restore gate
 * (src/recovery/gate.ts): that wait is by design, and lasts until someone runs
 * the recovery (the restore drill with --skip-recovery never does).
 */
const WORKER_UP =
  /"msg":"(worker started|a recovery after a database restore is pending; waiting for it before polling)"/;

/** The Temporal dev server, restartable on the same port and the same SQLite file. */
export class TemporalServer {
  server: DevServer | undefined;
  private unexpected: string[] = [];
  private expecting = false;

  constructor(
    readonly cli: string,
    readonly port: number,
    readonly dbFile: string,
    readonly logFile: string,
  ) {}

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.expecting = false;
    this.server = await startDevServer({
      cli: this.cli,
      port: this.port,
      dbFile: this.dbFile,
      logFile: this.logFile,
      readyTimeoutMs: READY_MS,
      log: () => undefined,
    });
    this.server.process.once('exit', (code, signal) => {
      if (!this.expecting) this.unexpected.push(signal ? `signal ${signal}` : `exit code ${code}`);
    });
  }

  async kill9(): Promise<void> {
    const child = this.server?.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    this.expecting = true;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }

  get alive(): boolean {
    const child = this.server?.process;
    return !!child && child.exitCode === null && child.signalCode === null;
  }

  takeUnexpectedExits(): string[] {
    const out = this.unexpected;
    this.unexpected = [];
    return out;
  }

  async stop(): Promise<void> {
    this.expecting = true;
    await this.server?.stop();
  }

  killNow(): void {
    this.expecting = true;
    if (this.alive) this.server?.process.kill('SIGKILL');
  }
}

export class ChaosStack {
  db!: ChaosDatabase;
  temporal!: TemporalServer;
  /** toxiproxy between the API and workers and Postgres and Temporal. */
  network!: ChaosNetwork;
  sandbox!: Supervised;
  workers: Supervised[] = [];
  api!: Supervised;
  /** The merchant: a receiver in this process, registered for the load tenant's order events (merchant.ts). */
  merchant = new MerchantReceiver();
  apiPort = 0;
  sandboxPort = 0;
  /** The environment every onceflow process gets (an ops command run against the stack needs it too). */
  serviceEnv: NodeJS.ProcessEnv = {};

  constructor(readonly opts: StackOptions) {}

  get apiUrl(): string {
    return `http://127.0.0.1:${this.apiPort}`;
  }

  get sandboxUrl(): string {
    return `http://127.0.0.1:${this.sandboxPort}`;
  }

  /** Every onceflow process (not Postgres, not Temporal). */
  get services(): Supervised[] {
    return [this.sandbox, ...this.workers, this.api].filter(Boolean);
  }

  async start(): Promise<void> {
    const { root, runDir, log } = this.opts;
    const cli = await ensureTemporalCli({ toolsDir: this.opts.toolsDir, log });
    const toxiproxy = await ensureToxiproxy({ toolsDir: this.opts.toolsDir, log });

    this.db = await openChaosDatabase({
      runDir,
      sharedUrl: this.opts.sharedDatabaseUrl,
      runId: this.opts.runId,
      shared: this.opts.sharedPostgres,
      log,
    });
    log(`database ${this.db.databaseName} migrated`);

    this.temporal = new TemporalServer(
      cli,
      await freePort(),
      path.join(runDir, 'temporal.sqlite'),
      path.join(runDir, 'temporal.log'),
    );
    await this.temporal.start();
    log(`Temporal dev server on ${this.temporal.address}`);

    const dbUrl = new URL(this.db.url);
    if (dbUrl.searchParams.has('host')) {
      throw new Error(
        'the chaos run needs Postgres over TCP (it puts toxiproxy in front of it): DATABASE_URL names a socket',
      );
    }
    this.network = await ChaosNetwork.start({
      binary: toxiproxy,
      logFile: path.join(runDir, 'toxiproxy.log'),
      seed: this.opts.seed ?? 1,
      upstreams: {
        postgres: `${dbUrl.hostname || 'localhost'}:${dbUrl.port || '5432'}`,
        temporal: this.temporal.address,
      },
    });
    const proxiedDbUrl = new URL(this.db.url);
    const [pgHost, pgPort] = this.network.address('postgres').split(':') as [string, string];
    proxiedDbUrl.hostname = pgHost;
    proxiedDbUrl.port = pgPort;
    log(
      `toxiproxy on ${this.network.server.client.url}: Postgres via ${this.network.address('postgres')}, ` +
        `Temporal via ${this.network.address('temporal')}`,
    );

    // One bundle for every worker start: a restarted worker polls within seconds (as a deployment with a pre-built bundle).
    const { path: bundlePath } = await ensureWorkflowBundle({ log });

    this.apiPort = await freePort();
    this.sandboxPort = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATABASE_URL: proxiedDbUrl.toString(),
      TEMPORAL_ADDRESS: this.network.address('temporal'),
      TEMPORAL_NAMESPACE: 'default',
      TEMPORAL_TASK_QUEUE: TASK_QUEUE,
      API_PORT: String(this.apiPort),
      SANDBOX_PORT: String(this.sandboxPort),
      SANDBOX_URL: this.sandboxUrl,
      WEBHOOK_URL: `${this.apiUrl}/v1/webhooks/payments`,
      WEBHOOK_SECRET: 'whsec_chaos',
      ONCEFLOW_ADMIN_TOKEN: ADMIN_TOKEN,
      ONCEFLOW_DATA_DIR: runDir,
      WORKFLOW_BUNDLE_PATH: bundlePath,
      BIND_HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      WEBHOOK_FIRST_RETRY_MS: String(WEBHOOK_FIRST_RETRY_MS),
    };
    this.serviceEnv = env;
    const node = (
      name: string,
      entry: string,
      extra: NodeJS.ProcessEnv,
      ready: (p: Supervised) => Promise<void>,
    ) =>
      new Supervised({
        name,
        command: process.execPath,
        args: ['--import', 'tsx', path.join(root, entry)],
        env: { ...env, ...extra },
        cwd: root,
        logFile: path.join(runDir, `${name}.log`),
        ready,
      });

    // The provider is an outside system: its own store is reached directly, never through a fault.
    this.sandbox = node('sandbox', 'dev/sandbox/main.ts', { DATABASE_URL: this.db.url }, (p) =>
      waitUntil('sandbox', () => httpOk(`${this.sandboxUrl}/healthz`), READY_MS, p),
    );
    await this.sandbox.start();
    for (const name of ['worker-1', 'worker-2']) {
      const metricsPort = await freePort();
      const sdkPort = await freePort();
      const worker = node(
        name,
        'src/worker/main.ts',
        { WORKER_METRICS_PORT: String(metricsPort), WORKER_SDK_METRICS_PORT: String(sdkPort) },
        (p) => waitUntil(name, async () => WORKER_UP.test(p.currentLog()), READY_MS, p),
      );
      this.workers.push(worker);
    }
    await Promise.all(this.workers.map((w) => w.start()));
    // Its metrics listener on a free port too: API_METRICS_PORT's default may be taken by a running stack.
    this.api = node('api', 'src/api/main.ts', { API_METRICS_PORT: String(await freePort()) }, (p) =>
      waitUntil('api', () => httpOk(`${this.apiUrl}/healthz`), READY_MS, p),
    );
    await this.api.start();
    log(`sandbox ${this.sandboxUrl}, API ${this.apiUrl}, 2 workers on task queue ${TASK_QUEUE}`);
    // Before any load: every terminal order of the run has an endpoint to be delivered to.
    await this.merchant.start(this.apiUrl, [{ id: TENANT_ID, key: TENANT_API_KEY }]);
    log(
      `merchant receiver on 127.0.0.1:${this.merchant.port}, registered for ${TENANT_ID}'s order events ` +
        `(first retry ${WEBHOOK_FIRST_RETRY_MS} ms)`,
    );
  }

  /**
   * Stops the sandbox and starts it again with these environment changes
   * (undefined removes a variable): its test knobs (dev/sandbox/tuning.ts) are
   * read at start. The supervisor spawns from the spec's env object, so a
   * change there is what the next start sees.
   */
  async restartSandbox(changes: Record<string, string | undefined>): Promise<void> {
    const env = this.sandbox.spec.env;
    for (const [name, value] of Object.entries(changes)) {
      if (value === undefined) delete env[name];
      else env[name] = value;
    }
    await this.sandbox.stop();
    await this.sandbox.start();
  }

  /** A fresh Temporal connection (the server may have been restarted since the last one). */
  async temporalConnection(): Promise<Connection> {
    return Connection.connect({ address: this.temporal.address, connectTimeout: 5_000 });
  }

  async stop(keepFiles = false): Promise<void> {
    await Promise.allSettled(this.services.map((s) => s.stop()));
    await this.merchant.down();
    await this.network?.stop().catch(() => undefined);
    await this.temporal?.stop().catch(() => undefined);
    await this.db?.close(keepFiles).catch(() => undefined);
  }

  /** Synchronous last resort on a second Ctrl-C or an exit: kill everything now. */
  killNow(): void {
    for (const s of this.services) s.killNow();
    this.merchant.killNow();
    this.network?.killNow();
    this.temporal?.killNow();
    this.db?.cluster?.proc.killNow();
  }
}
