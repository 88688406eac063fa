/**
 * Typed configuration. `loadConfig` is the only reader of `process.env` in the
 * product; everything else receives a `Config` (or a slice of it).
 */

export interface Config {
  databaseUrl: string;
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
  };
  sandboxUrl: string;
  /** Secret the sandbox signs webhooks with and the API verifies them with. */
  webhookSecret: string;
  /** Where the sandbox delivers its webhooks. */
  webhookUrl: string;
  /** Admin bearer token for operator routes. */
  adminToken: string;
  /** Folder for runtime state (Temporal's SQLite file, logs). */
  dataDir: string;
  /** Folder for tools the project builds itself (the Temporal CLI). */
  toolsDir: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/onceflow';

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
  };
  const address = env.TEMPORAL_ADDRESS || undefined;
  const logLevel = (env.LOG_LEVEL ?? 'info') as Config['logLevel'];
  if (!['debug', 'info', 'warn', 'error'].includes(logLevel)) {
    throw new ConfigError(
      `LOG_LEVEL must be one of debug, info, warn, error; got ${JSON.stringify(logLevel)}`,
    );
  }
  return {
    databaseUrl: env.DATABASE_URL || DEFAULT_DATABASE_URL,
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
    dataDir: env.ONCEFLOW_DATA_DIR || `${root}/.data`,
    toolsDir: env.ONCEFLOW_TOOLS_DIR || `${root}/.tools`,
    logLevel,
  };
}
