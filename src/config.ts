/**
 * Typed configuration. `loadConfig` is the only reader of `process.env` in the
 * product; everything else receives a `Config` (or a slice of it).
 */

import { ConfigError } from './config/error.ts';
import { duration, nonNegativeInt, onOff, oneOf, port, positiveInt } from './config/env.ts';
import {
  defineCredential,
  definePreviousWebhookSecret,
  exposureOf,
  type Credential,
  type Exposure,
} from './config/credentials.ts';
import { providersConfig, type ProvidersConfig } from './config/providers.ts';
import { readWebhookSettings, type WebhookSettings } from './merchant-events/settings.ts';

/**
 * What `loadConfig` throws, imported from here by its callers. It lives in src/config/error.ts so the
 * modules this one reads with (src/config/*.ts) can throw it without an import cycle.
 */
export { ConfigError };

export interface Config {
  databaseUrl: string;
  /** Address our HTTP servers bind to; 127.0.0.1 unless BIND_HOST says otherwise (containers). */
  bindHost: string;
  /**
   * METRICS_BIND_HOST: 127.0.0.1 whatever BIND_HOST says, so exposing the API does not expose its metrics.
   */
  metricsBindHost: string;
  /**
   * METRICS_BACKLOG=on|off: whether this process exports the backlog gauges. They describe the
   * database, so exactly one exporter serves them: by default the API (only `api-1`), never a worker.
   */
  metricsBacklog: boolean | undefined;
  /**
   * RESTORE_DETECTION=on|off (default on): check at start that the database has every order
   * Temporal's latest workflows name, and close the restore gate if not (src/recovery/gate.ts).
   */
  restoreDetection: boolean;
  /** Whether the API may be reachable from other hosts; exposed, published credentials are refused. */
  exposure: Exposure;
  temporal: {
    /** host:port of the Temporal frontend: TEMPORAL_ADDRESS, else 127.0.0.1:TEMPORAL_PORT. */
    address: string;
    /** TEMPORAL_ADDRESS names a server someone else runs; otherwise `npm start` starts one. */
    external: boolean;
    namespace: string;
    taskQueue: string;
    /** Where the Temporal UI answers, for links printed to users. */
    uiUrl: string;
    /**
     * TEMPORAL_BACKEND: the server started without TEMPORAL_ADDRESS: `dev` (SQLite, default) or `postgres`.
     */
    backend: 'dev' | 'postgres';
    /** For the `postgres` backend: where its databases live. */
    postgres: {
      /** TEMPORAL_POSTGRES_URL, else DATABASE_URL's server and credentials (its database name is not used). */
      url: string;
      /** TEMPORAL_DB (default `temporal`). */
      database: string;
      /** TEMPORAL_VISIBILITY_DB (default `temporal_visibility`). */
      visibilityDatabase: string;
    };
  };
  ports: {
    temporal: number;
    temporalUi: number;
    api: number;
    sandbox: number;
    workerMetrics: number;
    /** The Temporal SDK's own Prometheus exporter (loopback only); merged into the worker's /metrics. */
    workerSdkMetrics: number;
    /** API_METRICS_PORT: never the API port, since the figures span every tenant. */
    apiMetrics: number;
  };
  sandboxUrl: string;
  /** Secret the sandbox signs webhooks with and the API verifies them with. */
  webhookSecret: string;
  /** WEBHOOK_SECRET_PREVIOUS: the secret being retired during a rotation; verified, never signed with. */
  webhookSecretPrevious: string | null;
  /** Where the sandbox delivers its webhooks. */
  webhookUrl: string;
  /** Admin bearer token for operator routes. */
  adminToken: string;
  /**
   * API_KEY_SECRET: tags API keys so a forged one is refused before any lookup; changing it invalidates
   * them.
   */
  apiKeySecret: string;
  api: {
    /** Slow-client bounds of the API's HTTP server (docs/API.md "Limits"). */
    headersTimeoutMs: number;
    requestTimeoutMs: number;
    idleTimeoutMs: number;
    keepAliveTimeoutMs: number;
    /** Open connections beyond this are dropped at accept. */
    maxConnections: number;
    maxRequestsPerSocket: number;
    /** Failed API-key attempts per client address per window before 429 (API_AUTH_FAILURE_MAX). */
    authFailureMax: number;
    authFailureWindowMs: number;
    /** Failed admin-credential attempts per client address per window before 429. */
    adminAuthFailureMax: number;
    adminAuthFailureWindowMs: number;
    /** How long a verified API key is trusted without a database lookup; also the revocation delay. */
    apiKeyCacheTtlMs: number;
    /** API_KEY_ALLOW_UNTAGGED (default on): accept keys minted before tags; off once they are rotated. */
    apiKeyAllowUntagged: boolean;
    /**
     * API_TRUST_PROXY: proxies whose X-Forwarded-For is believed; empty: the socket address is the client.
     */
    trustProxy: string[];
    /** OUTBOX_RELAY=off: orders are committed but workflows never started (crash-recovery tests, demos). */
    outboxRelay: boolean;
    /** CONSOLE=on|off: on by default, since its every action needs an operator credential anyway. */
    console: boolean;
    /** How often the relay polls for unstarted workflows (ms). */
    outboxPollMs: number;
    /**
     * WEBHOOK_CHARGE_WAIT_MS: how long a webhook that overtakes its charge's answer waits for it
     * (webhooks.ts).
     */
    webhookChargeWaitMs: number;
    /** Requests per tenant per window (API_RATE_LIMIT_MAX). */
    rateLimitMax: number;
    rateLimitWindowMs: number;
    /**
     * The API's Postgres bounds (docs/DEPLOYING.md "Postgres timeouts"): while Postgres can't be
     * reached, a request that needs it answers 503 with Retry-After within about `queryTimeoutMs`.
     */
    db: {
      /** API_DB_CONNECT_TIMEOUT_MS: opening a connection, or waiting for a free one. */
      connectTimeoutMs: number;
      /** API_DB_STATEMENT_TIMEOUT_MS: Postgres cancels a statement that runs longer (server-side). */
      statementTimeoutMs: number;
      /** API_DB_QUERY_TIMEOUT_MS: no answer at all within this and the connection is dropped (client-side). */
      queryTimeoutMs: number;
      /**
       * How long a request waits for another still holding its Idempotency-Key before 409 (the
       * ledger's lock_timeout): two thirds of the statement timeout, at most 5 s, so it ends first.
       */
      idempotencyWaitMs: number;
    };
  };
  /** Process counts (WORKERS, API_PROCESSES); default 1. */
  workers: number;
  apiProcesses: number;
  /** ONCEFLOW_PROCESS: `api-2`, `worker-1`…, the metrics' `process` label when a service runs several. */
  processName: string | undefined;
  /** Folder for runtime state (Temporal's SQLite file, logs). */
  dataDir: string;
  /** Folder for tools the project builds itself (the Temporal CLI). */
  toolsDir: string;
  logLevel: 'debug' | 'info' | 'warn' | 'error';
  /** LOG_PRETTY=on|off; unset: pretty when stdout is a terminal. */
  logPretty: boolean | undefined;
  /** Client-side timeout of one provider call; must be shorter than an activity attempt. */
  providerTimeoutMs: number;
  /** Which provider adapters the worker (and the operator) use; docs/PROVIDERS.md. */
  providers: ProvidersConfig;
  /**
   * Ledger claim lease: renewed while a step runs, so a crashed worker's step is taken over once it runs
   * out.
   */
  ledgerLeaseMs: number;
  /** A pre-built workflow bundle (production builds, tests); otherwise workflows are bundled at start-up. */
  workflowBundlePath: string | undefined;
  /** WORKER_SMOKE_WORKFLOW=on: the worker also registers the smoke probe (`npm start` sets it). Default off. */
  workerSmokeWorkflow: boolean;
  /** Worker Versioning (src/worker/deployment.ts; docs/UPGRADING.md). */
  workerVersioning: {
    /** ONCEFLOW_WORKER_VERSIONING=off: an unversioned worker, which runs every run on its task queue. Default on. */
    enabled: boolean;
    /**
     * ONCEFLOW_WORKER_DEPLOYMENT: default the task queue's name, so separate stacks never share a Current
     * Version.
     */
    deploymentName: string;
    /** ONCEFLOW_WORKER_BUILD_ID; unset: the package version and the workflow code's hash (defaultBuildId). */
    buildId: string | undefined;
    /**
     * ONCEFLOW_WORKER_PROMOTE: `auto` makes a new build current once it polls; `never` leaves it to the
     * pipeline.
     */
    promote: 'auto' | 'never';
  };
  /** `npm run demo`: where it finds the API, and keys replacing the seeded demo tenants' published ones. */
  demo: {
    /** DEMO_API_URL; default the local API on API_PORT. */
    apiUrl: string;
    /** DEMO_ACME_KEY / DEMO_GLOBEX_KEY. */
    acmeKey: string | undefined;
    globexKey: string | undefined;
  };
  retention: {
    /** Finished ledger records older than this are deleted; never less than the provider's 24 h key window. */
    windowMs: number;
    /** How often the retention Schedule runs. */
    intervalMs: number;
    /** webhook_events markers older than this are deleted; never less than the 3-day redelivery horizon. */
    webhookWindowMs: number;
    /** Started workflow_outbox rows older than this are deleted; never less than the 3-day redelivery horizon. */
    outboxWindowMs: number;
  };
  tracing: {
    /** OTEL_EXPORTER_OTLP_ENDPOINT: OTLP/HTTP base URL; unset, nothing is traced. */
    otlpEndpoint: string | undefined;
  };
  /** Merchant webhooks: the URL policy and the retry schedule (src/merchant-events/settings.ts). */
  webhooks: WebhookSettings;
}

/** Reads a process's credentials at start-up, so a refusal names every variable before the first request. */
export function requireCredentials(config: Config, names: Credential[]): void {
  const problems: string[] = [];
  for (const name of names) {
    try {
      void config[name];
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(err.message);
    }
  }
  if (problems.length) throw new ConfigError(problems.join('\n'));
}

const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/onceflow';

/**
 * The API's Postgres bounds. The client-side query timeout must be above the server-side statement
 * timeout: a statement that is only slow is then cancelled by Postgres and its connection kept, and
 * only a server (or network) that does not answer at all meets the client-side bound.
 */
function apiDatabaseTimeouts(env: NodeJS.ProcessEnv): Config['api']['db'] {
  const connectTimeoutMs = duration(env, 'API_DB_CONNECT_TIMEOUT_MS', 2_000);
  const statementTimeoutMs = duration(env, 'API_DB_STATEMENT_TIMEOUT_MS', 3_000);
  const queryTimeoutMs = duration(env, 'API_DB_QUERY_TIMEOUT_MS', 4_000);
  if (queryTimeoutMs <= statementTimeoutMs) {
    throw new ConfigError(
      `API_DB_QUERY_TIMEOUT_MS (${queryTimeoutMs}) must be above API_DB_STATEMENT_TIMEOUT_MS ` +
        `(${statementTimeoutMs}): Postgres cancels a slow statement first and the connection is kept; ` +
        'the client-side bound is for a server or network that does not answer at all',
    );
  }
  return {
    connectTimeoutMs,
    statementTimeoutMs,
    queryTimeoutMs,
    idempotencyWaitMs: Math.max(1, Math.min(5_000, Math.floor((statementTimeoutMs * 2) / 3))),
  };
}

/** Providers time a webhook delivery out after seconds (the sandbox after 5): the wait stays well inside. */
const MAX_WEBHOOK_CHARGE_WAIT_MS = 3_000;

function webhookChargeWait(env: NodeJS.ProcessEnv): number {
  const ms = nonNegativeInt(env, 'WEBHOOK_CHARGE_WAIT_MS', 1000);
  if (ms > MAX_WEBHOOK_CHARGE_WAIT_MS) {
    throw new ConfigError(
      `WEBHOOK_CHARGE_WAIT_MS must be at most ${MAX_WEBHOOK_CHARGE_WAIT_MS} ms (a provider times its delivery out), got ${ms}`,
    );
  }
  return ms;
}

function workerVersioning(env: NodeJS.ProcessEnv, taskQueue: string): Config['workerVersioning'] {
  const deploymentName = env.ONCEFLOW_WORKER_DEPLOYMENT?.trim() || taskQueue;
  // Temporal writes a version as <deployment>:<build ID> (and <deployment>.<build ID> before).
  if (/[.:]/.test(deploymentName)) {
    throw new ConfigError(
      `ONCEFLOW_WORKER_DEPLOYMENT (default: TEMPORAL_TASK_QUEUE) must not contain '.' or ':', got ${JSON.stringify(deploymentName)}`,
    );
  }
  const buildId = env.ONCEFLOW_WORKER_BUILD_ID?.trim() || undefined;
  if (buildId !== undefined && (buildId.length > 255 || /\s/.test(buildId))) {
    throw new ConfigError('ONCEFLOW_WORKER_BUILD_ID must be at most 255 characters, without spaces');
  }
  return {
    enabled: onOff(env, 'ONCEFLOW_WORKER_VERSIONING', true),
    deploymentName,
    buildId,
    promote: oneOf(env, 'ONCEFLOW_WORKER_PROMOTE', ['auto', 'never'] as const, 'auto'),
  };
}

function otlpEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (raw === undefined || raw.trim() === '') return undefined;
  const protocol = URL.canParse(raw.trim()) ? new URL(raw.trim()).protocol : null;
  if (protocol !== 'http:' && protocol !== 'https:') {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  return raw.trim();
}

function webhookSettings(env: NodeJS.ProcessEnv, exposure: Exposure): WebhookSettings {
  try {
    return readWebhookSettings(env, exposure);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, root = process.cwd()): Config {
  const ports = {
    temporal: port(env, 'TEMPORAL_PORT', 7233),
    temporalUi: port(env, 'TEMPORAL_UI_PORT', 8233),
    api: port(env, 'API_PORT', 3000),
    sandbox: port(env, 'SANDBOX_PORT', 4010),
    workerMetrics: port(env, 'WORKER_METRICS_PORT', 9464),
    workerSdkMetrics: 0,
    apiMetrics: port(env, 'API_METRICS_PORT', 9462),
  };
  ports.workerSdkMetrics = port(env, 'WORKER_SDK_METRICS_PORT', ports.workerMetrics + 1);
  const externalAddress = env.TEMPORAL_ADDRESS || undefined;
  const logLevel = oneOf(env, 'LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info');
  const bindHost = env.BIND_HOST || '127.0.0.1';
  const headersTimeoutMs = duration(env, 'API_HEADERS_TIMEOUT_MS', 10_000);
  const requestTimeoutMs = duration(env, 'API_REQUEST_TIMEOUT_MS', 30_000);
  if (requestTimeoutMs < headersTimeoutMs) {
    // Node refuses a server whose whole-request bound is shorter than its header bound.
    throw new ConfigError(
      `API_REQUEST_TIMEOUT_MS (${requestTimeoutMs}) must be at least API_HEADERS_TIMEOUT_MS (${headersTimeoutMs})`,
    );
  }
  const apiDb = apiDatabaseTimeouts(env);
  const backend = env.TEMPORAL_BACKEND || 'dev';
  if (backend !== 'dev' && backend !== 'postgres') {
    throw new ConfigError(
      `TEMPORAL_BACKEND must be dev (the Temporal dev server on SQLite) or postgres (the Temporal server on Postgres), got ${JSON.stringify(backend)}`,
    );
  }
  const databaseUrl = env.DATABASE_URL || DEFAULT_DATABASE_URL;
  const trustProxy = (env.API_TRUST_PROXY ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const exposure = exposureOf({ bindHost, trustProxy, nodeEnv: env.NODE_ENV });
  const sandboxUrl = env.SANDBOX_URL || `http://127.0.0.1:${ports.sandbox}`;
  const config = {
    databaseUrl,
    bindHost,
    metricsBindHost: env.METRICS_BIND_HOST || '127.0.0.1',
    metricsBacklog:
      env.METRICS_BACKLOG === undefined || env.METRICS_BACKLOG === ''
        ? undefined
        : onOff(env, 'METRICS_BACKLOG', true),
    restoreDetection: onOff(env, 'RESTORE_DETECTION', true),
    exposure,
    temporal: {
      address: externalAddress ?? `127.0.0.1:${ports.temporal}`,
      external: externalAddress !== undefined,
      namespace: env.TEMPORAL_NAMESPACE || 'default',
      taskQueue: env.TEMPORAL_TASK_QUEUE || 'onceflow-orders',
      uiUrl: env.TEMPORAL_UI_URL || `http://127.0.0.1:${ports.temporalUi}`,
      backend,
      postgres: {
        url: env.TEMPORAL_POSTGRES_URL || databaseUrl,
        database: env.TEMPORAL_DB || 'temporal',
        visibilityDatabase: env.TEMPORAL_VISIBILITY_DB || 'temporal_visibility',
      },
    },
    ports,
    sandboxUrl,
    webhookUrl: env.WEBHOOK_URL || `http://127.0.0.1:${ports.api}/v1/webhooks/payments`,
    api: {
      headersTimeoutMs,
      requestTimeoutMs,
      // Above the 30 s long-poll (GET /v1/orders/{id}?wait=30), which sends nothing while it waits.
      idleTimeoutMs: duration(env, 'API_IDLE_TIMEOUT_MS', 65_000),
      keepAliveTimeoutMs: duration(env, 'API_KEEP_ALIVE_TIMEOUT_MS', 10_000),
      maxConnections: positiveInt(env, 'API_MAX_CONNECTIONS', 1024),
      maxRequestsPerSocket: positiveInt(env, 'API_MAX_REQUESTS_PER_SOCKET', 1000),
      authFailureMax: positiveInt(env, 'API_AUTH_FAILURE_MAX', 20),
      authFailureWindowMs: duration(env, 'API_AUTH_FAILURE_WINDOW_MS', 60_000),
      adminAuthFailureMax: positiveInt(env, 'API_ADMIN_AUTH_FAILURE_MAX', 10),
      adminAuthFailureWindowMs: duration(env, 'API_ADMIN_AUTH_FAILURE_WINDOW_MS', 60_000),
      apiKeyCacheTtlMs: nonNegativeInt(env, 'API_KEY_CACHE_TTL_MS', 10_000),
      apiKeyAllowUntagged: onOff(env, 'API_KEY_ALLOW_UNTAGGED', true),
      trustProxy,
      outboxRelay: onOff(env, 'OUTBOX_RELAY', true),
      console: onOff(env, 'CONSOLE', true),
      outboxPollMs: positiveInt(env, 'OUTBOX_POLL_MS', 1000),
      webhookChargeWaitMs: webhookChargeWait(env),
      rateLimitMax: positiveInt(env, 'API_RATE_LIMIT_MAX', 1000),
      rateLimitWindowMs: positiveInt(env, 'API_RATE_LIMIT_WINDOW_MS', 60_000),
      db: apiDb,
    },
    workers: positiveInt(env, 'WORKERS', 1),
    apiProcesses: positiveInt(env, 'API_PROCESSES', 1),
    processName: env.ONCEFLOW_PROCESS || undefined,
    dataDir: env.ONCEFLOW_DATA_DIR || `${root}/.data`,
    toolsDir: env.ONCEFLOW_TOOLS_DIR || `${root}/.tools`,
    logLevel,
    logPretty:
      env.LOG_PRETTY === undefined || env.LOG_PRETTY === '' ? undefined : onOff(env, 'LOG_PRETTY', false),
    providerTimeoutMs: duration(env, 'PROVIDER_TIMEOUT_MS', 10_000),
    providers: providersConfig(env, sandboxUrl),
    ledgerLeaseMs: duration(env, 'LEDGER_LEASE_MS', 15_000),
    workflowBundlePath: env.WORKFLOW_BUNDLE_PATH || undefined,
    workerSmokeWorkflow: onOff(env, 'WORKER_SMOKE_WORKFLOW', false),
    workerVersioning: workerVersioning(env, env.TEMPORAL_TASK_QUEUE || 'onceflow-orders'),
    demo: {
      apiUrl: env.DEMO_API_URL || `http://127.0.0.1:${ports.api}`,
      acmeKey: env.DEMO_ACME_KEY || undefined,
      globexKey: env.DEMO_GLOBEX_KEY || undefined,
    },
    retention: {
      windowMs: duration(env, 'RETENTION_WINDOW_MS', 7 * 24 * 60 * 60 * 1000),
      // With the Schedule's batch caps, keeps up with the benchmarked rate (src/retention/schedule.ts).
      intervalMs: duration(env, 'RETENTION_INTERVAL_MS', 15 * 60 * 1000),
      // Both checked against the 3-day redelivery horizon when the worker creates the Schedule.
      webhookWindowMs: duration(env, 'RETENTION_WEBHOOK_WINDOW_MS', 7 * 24 * 60 * 60 * 1000),
      outboxWindowMs: duration(env, 'RETENTION_OUTBOX_WINDOW_MS', 7 * 24 * 60 * 60 * 1000),
    },
    tracing: { otlpEndpoint: otlpEndpoint(env) },
    webhooks: webhookSettings(env, exposure),
  } as Omit<Config, Credential> as Config;
  defineCredential(config, 'adminToken', env, exposure);
  defineCredential(config, 'webhookSecret', env, exposure);
  definePreviousWebhookSecret(config, env, exposure);
  defineCredential(config, 'apiKeySecret', env, exposure);
  return config;
}
