/**
 * Typed configuration. `loadConfig` is the only reader of `process.env` in the
 * product; everything else receives a `Config` (or a slice of it).
 */

export interface Config {
  databaseUrl: string;
  /** Address our HTTP servers bind to; 127.0.0.1 unless BIND_HOST says otherwise (containers). */
  bindHost: string;
  temporal: {
    /** host:port of the Temporal frontend; undefined means "start a dev server". */
    address: string | undefined;
    namespace: string;
    taskQueue: string;
    /** Where the Temporal UI answers, for links printed to users. */
    uiUrl: string;
  };
  ports: {
    temporal: number;
    temporalUi: number;
    api: number;
    sandbox: number;
    workerMetrics: number;
    /** The Temporal SDK's own Prometheus exporter (loopback only); merged into the worker's /metrics. */
    workerSdkMetrics: number;
  };
  sandboxUrl: string;
  /** Secret the sandbox signs webhooks with and the API verifies them with. */
  webhookSecret: string;
  /** Where the sandbox delivers its webhooks. */
  webhookUrl: string;
  /** Admin bearer token for operator routes. */
  adminToken: string;
  api: {
    /**
     * OUTBOX_RELAY=off: the API commits orders and their start intents but
     * never starts workflows (neither right after commit nor from the relay).
     * Only for crash-recovery tests and demos; the default is on.
     */
    outboxRelay: boolean;
    /** How often the relay polls for unstarted workflows (ms). */
    outboxPollMs: number;
    /** Requests per tenant per window (API_RATE_LIMIT_MAX). */
    rateLimitMax: number;
    rateLimitWindowMs: number;
  };
  /** Folder for runtime state (Temporal's SQLite file, logs). */
  dataDir: string;
  /** Folder for tools the project builds itself (the Temporal CLI). */
  toolsDir: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
  /** Client-side timeout of one provider call; must be shorter than an activity attempt. */
  providerTimeoutMs: number;
  /**
   * Ledger claim lease (15 s by default). Renewed while the step runs (every
   * third of it, or twice per activity heartbeat timeout), so it only has to
   * outlast a renewal interval; a crashed worker's step is taken over once it
   * runs out.
   */
  ledgerLeaseMs: number;
  /** A pre-built workflow bundle (production builds, tests); otherwise workflows are bundled at start-up. */
  workflowBundlePath: string | undefined;
  retention: {
    /** Finished ledger records older than this are deleted; never less than the provider's 24 h key window. */
    windowMs: number;
    /** How often the retention Schedule runs. */
    intervalMs: number;
  };
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/onceflow';

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new ConfigError(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  }
  return n;
}

function onOff(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (['on', 'true', '1'].includes(raw)) return true;
  if (['off', 'false', '0'].includes(raw)) return false;
  throw new ConfigError(`${name} must be on or off, got ${JSON.stringify(raw)}`);
}

function duration(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) {
    throw new ConfigError(`${name} must be a positive number of milliseconds, got ${JSON.stringify(raw)}`);
  }
  return n;
}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0 || n > 65535) {
    throw new ConfigError(`${name} must be a port number (1-65535), got ${JSON.stringify(raw)}`);
  }
  return n;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, root = process.cwd()): Config {
  const ports = {
    temporal: int(env, 'TEMPORAL_PORT', 7233),
    temporalUi: int(env, 'TEMPORAL_UI_PORT', 8233),
    api: int(env, 'API_PORT', 3000),
    sandbox: int(env, 'SANDBOX_PORT', 4010),
    workerMetrics: int(env, 'WORKER_METRICS_PORT', 9464),
    workerSdkMetrics: 0,
  };
  ports.workerSdkMetrics = int(env, 'WORKER_SDK_METRICS_PORT', ports.workerMetrics + 1);
  const address = env.TEMPORAL_ADDRESS || undefined;
  const logLevel = (env.LOG_LEVEL ?? 'info') as Config['logLevel'];
  if (!['debug', 'info', 'warn', 'error'].includes(logLevel)) {
    throw new ConfigError(
      `LOG_LEVEL must be one of debug, info, warn, error; got ${JSON.stringify(logLevel)}`,
    );
  }
  return {
    databaseUrl: env.DATABASE_URL || DEFAULT_DATABASE_URL,
    bindHost: env.BIND_HOST || '127.0.0.1',
    temporal: {
      address,
      namespace: env.TEMPORAL_NAMESPACE || 'default',
      taskQueue: env.TEMPORAL_TASK_QUEUE || 'onceflow-orders',
      uiUrl: env.TEMPORAL_UI_URL || `http://127.0.0.1:${ports.temporalUi}`,
    },
    ports,
    sandboxUrl: env.SANDBOX_URL || `http://127.0.0.1:${ports.sandbox}`,
    webhookSecret: env.WEBHOOK_SECRET || 'whsec_onceflow_local_dev',
    webhookUrl: env.WEBHOOK_URL || `http://127.0.0.1:${ports.api}/v1/webhooks/payments`,
    adminToken: env.ONCEFLOW_ADMIN_TOKEN || 'admin_local_dev_token',
    api: {
      outboxRelay: onOff(env, 'OUTBOX_RELAY', true),
      outboxPollMs: positiveInt(env, 'OUTBOX_POLL_MS', 1000),
      rateLimitMax: positiveInt(env, 'API_RATE_LIMIT_MAX', 1000),
      rateLimitWindowMs: positiveInt(env, 'API_RATE_LIMIT_WINDOW_MS', 60_000),
    },
    dataDir: env.ONCEFLOW_DATA_DIR || `${root}/.data`,
    toolsDir: env.ONCEFLOW_TOOLS_DIR || `${root}/.tools`,
    logLevel,
    providerTimeoutMs: duration(env, 'PROVIDER_TIMEOUT_MS', 10_000),
    ledgerLeaseMs: duration(env, 'LEDGER_LEASE_MS', 15_000),
    workflowBundlePath: env.WORKFLOW_BUNDLE_PATH || undefined,
    retention: {
      windowMs: duration(env, 'RETENTION_WINDOW_MS', 7 * 24 * 60 * 60 * 1000),
      intervalMs: duration(env, 'RETENTION_INTERVAL_MS', 60 * 60 * 1000),
    },
  };
}
