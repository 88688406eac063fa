/**
 * Typed configuration. `loadConfig` is the only reader of `process.env` in the
 * product; everything else receives a `Config` (or a slice of it).
 */

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
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** True for addresses only this machine can reach; everything else is "exposed". */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127(\.\d{1,3}){3}$/.test(h);
}

export interface Exposure {
  exposed: boolean;
  /** One sentence per sign, for refusal messages; empty when not exposed. */
  reasons: string[];
}

/**
 * A loopback bind does not prove only this machine reaches the API (a proxy or tunnel may forward
 * to it), so any sign counts: a non-loopback bind, a configured proxy, or NODE_ENV=production.
 */
export function exposureOf(s: {
  bindHost: string;
  trustProxy: readonly string[];
  nodeEnv?: string;
}): Exposure {
  const reasons: string[] = [];
  if (!isLoopbackHost(s.bindHost)) reasons.push(`BIND_HOST=${s.bindHost} is not a loopback address`);
  if (s.trustProxy.length > 0) reasons.push('API_TRUST_PROXY is set: the API is reachable through a proxy');
  if (s.nodeEnv === 'production') reasons.push('NODE_ENV=production');
  return { exposed: reasons.length > 0, reasons };
}

/**
 * A conservative entropy estimate in bits: the least of the character-class, repeating-unit and
 * Shannon estimates. It only refuses what is obviously weak.
 */
export function estimateEntropyBits(secret: string): number {
  const chars = [...secret];
  if (chars.length === 0) return 0;
  let pool = 0;
  if (chars.some((c) => c >= 'a' && c <= 'z')) pool += 26;
  if (chars.some((c) => c >= 'A' && c <= 'Z')) pool += 26;
  if (chars.some((c) => c >= '0' && c <= '9')) pool += 10;
  if (chars.some((c) => !/[a-zA-Z0-9]/.test(c))) pool += 33;
  const perChar = Math.log2(pool);
  let period = chars.length;
  for (let p = 1; p < chars.length; p++) {
    if (chars.every((c, i) => i < p || c === chars[i - p])) {
      period = p;
      break;
    }
  }
  const counts = new Map<string, number>();
  for (const c of chars) counts.set(c, (counts.get(c) ?? 0) + 1);
  let shannon = 0;
  for (const n of counts.values()) shannon -= (n / chars.length) * Math.log2(n / chars.length);
  return Math.min(chars.length * perChar, period * perChar, chars.length * shannon);
}

/** Explicit values of these credentials must carry this much entropy, on any bind. */
const MIN_ENTROPY_BITS: Partial<Record<Credential, number>> = {
  adminToken: 128,
  // One valid key is enough to brute-force a weak tag secret offline.
  apiKeySecret: 128,
};

/**
 * Published local-only credentials: accepted only on loopback, since anyone reaching an exposed port has
 * read them.
 */
export const PUBLISHED_CREDENTIALS = {
  adminToken: {
    env: 'ONCEFLOW_ADMIN_TOKEN',
    localDefault: 'admin_local_dev_token',
    published: ['admin_local_dev_token', 'admin_compose_change_me'],
  },
  webhookSecret: {
    env: 'WEBHOOK_SECRET',
    localDefault: 'whsec_onceflow_local_dev',
    published: ['whsec_onceflow_local_dev', 'whsec_onceflow_compose_change_me'],
  },
  apiKeySecret: {
    env: 'API_KEY_SECRET',
    localDefault: 'apikey_onceflow_local_dev',
    published: ['apikey_onceflow_local_dev'],
  },
} as const;

export type Credential = keyof typeof PUBLISHED_CREDENTIALS;

function refusal(name: Credential, exposure: Exposure, explicitPublished: boolean): string {
  const { env } = PUBLISHED_CREDENTIALS[name];
  return (
    `${env} ${explicitPublished ? 'is set to a published example value' : 'is not set'} while the API ` +
    `may be reachable from other hosts (${exposure.reasons.join('; ')}); the local default is public, ` +
    `so this process refuses to use it. Generate a secret with \`openssl rand -hex 32\` and set ${env} ` +
    `(the same value in every onceflow process).`
  );
}

function weakRefusal(name: Credential, bits: number, minBits: number): string {
  const { env } = PUBLISHED_CREDENTIALS[name];
  return (
    `${env} is too easy to guess: about ${Math.floor(bits)} bits of entropy, and at least ${minBits} bits ` +
    `are required (it is short, uses few kinds of characters, or repeats itself). Generate one with ` +
    `\`openssl rand -hex 32\` and set ${env} (the same value in every onceflow process).`
  );
}

/**
 * A credential, or a property that throws `ConfigError` when read (exposed without a safe value, or
 * too weak): only the processes that use it refuse to start.
 */
function defineCredential(target: object, name: Credential, env: NodeJS.ProcessEnv, exposure: Exposure) {
  const spec = PUBLISHED_CREDENTIALS[name];
  const raw = env[spec.env];
  const explicit = raw !== undefined && raw !== '';
  const publishedValue = explicit && (spec.published as readonly string[]).includes(raw);
  const minBits = MIN_ENTROPY_BITS[name];
  // A published value is judged by exposure alone: on loopback it is the local default by another name.
  const bits = explicit && !publishedValue && minBits !== undefined ? estimateEntropyBits(raw) : Infinity;
  const message =
    exposure.exposed && (!explicit || publishedValue)
      ? refusal(name, exposure, publishedValue)
      : minBits !== undefined && bits < minBits
        ? weakRefusal(name, bits, minBits)
        : undefined;
  if (message !== undefined) {
    Object.defineProperty(target, name, {
      enumerable: false,
      get() {
        throw new ConfigError(message);
      },
    });
  } else {
    Object.defineProperty(target, name, { enumerable: true, value: explicit ? raw : spec.localDefault });
  }
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

function nonNegativeInt(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new ConfigError(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  }
  return n;
}

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

/** WEBHOOK_SECRET_PREVIOUS: optional; a published value is refused as the current one's would be. */
function definePreviousWebhookSecret(target: object, env: NodeJS.ProcessEnv, exposure: Exposure) {
  const raw = env.WEBHOOK_SECRET_PREVIOUS;
  const value = raw === undefined || raw === '' ? null : raw;
  const published = PUBLISHED_CREDENTIALS.webhookSecret.published as readonly string[];
  if (value !== null && exposure.exposed && published.includes(value)) {
    const message =
      `WEBHOOK_SECRET_PREVIOUS is set to a published example value while the API may be reachable from ` +
      `other hosts (${exposure.reasons.join('; ')}); anyone could sign webhooks with it. Unset it, or set ` +
      `it to the secret being retired.`;
    Object.defineProperty(target, 'webhookSecretPrevious', {
      enumerable: false,
      get() {
        throw new ConfigError(message);
      },
    });
  } else {
    Object.defineProperty(target, 'webhookSecretPrevious', { enumerable: true, value });
  }
}

interface ProvidersConfig {
  /** PAYMENT_PROVIDER: `sandbox` (default) or `stripe`. */
  payment: 'sandbox' | 'stripe';
  /** EMAIL_PROVIDER: `sandbox` (default) or `smtp`. */
  email: 'sandbox' | 'smtp';
  stripe: {
    /** STRIPE_SECRET_KEY; unset: the sandbox's test key. A live key needs ONCEFLOW_ALLOW_LIVE=1. */
    secretKey: string;
    /** STRIPE_API_BASE: where the Stripe API is (a local test server); unset with a real key: api.stripe.com. */
    apiBase: string | undefined;
    /** STRIPE_WEBHOOK_SECRET; null: the sandbox signs, so WEBHOOK_SECRET verifies. */
    webhookSecret: string | null;
    /** STRIPE_KEY_WINDOW_MS: how long Stripe keeps idempotency keys (24 h; shortened against a test server). */
    keyWindowMs: number;
    /** STRIPE_SEARCH_LAG_MS: how far Stripe's search may lag behind writes (1 h, its worst case in incidents). */
    searchLagMs: number;
  };
  smtp: {
    /** SMTP_URL, e.g. smtps://user:pass@smtp.example.com:465; default the local dev server (SMTP_PORT, 2525). */
    url: string;
    /** RECEIPT_FROM: the receipts' From address. */
    from: string;
    /** RECEIPT_UNCERTAIN_POLICY: `at_least_once` (default) or `at_most_once`. */
    uncertainPolicy: 'at_least_once' | 'at_most_once';
  };
}

/** The test key the sandbox's Stripe surface accepts; never a real credential. */
export const SANDBOX_STRIPE_KEY = 'sk_test_onceflow_sandbox';

function oneOf<T extends string>(env: NodeJS.ProcessEnv, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(values as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${values.join(', ')}; got ${JSON.stringify(raw)}`);
  }
  return raw as T;
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

function httpUrl(name: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`${name} must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  return raw;
}

function providersConfig(env: NodeJS.ProcessEnv, sandboxUrl: string): ProvidersConfig {
  const payment = oneOf(env, 'PAYMENT_PROVIDER', ['sandbox', 'stripe'] as const, 'sandbox');
  const email = oneOf(env, 'EMAIL_PROVIDER', ['sandbox', 'smtp'] as const, 'sandbox');
  const givenKey = env.STRIPE_SECRET_KEY?.trim() || undefined;
  if (givenKey !== undefined) {
    if (!/^(sk|rk)_(test|live)_[A-Za-z0-9_]+$/.test(givenKey)) {
      throw new ConfigError(
        'STRIPE_SECRET_KEY must be a Stripe secret or restricted key (sk_test_..., rk_test_...); ' +
          'copy it from the Stripe dashboard, Developers > API keys',
      );
    }
    // Real money moves with a live key: only on purpose.
    if (/^(sk|rk)_live_/.test(givenKey) && env.ONCEFLOW_ALLOW_LIVE !== '1') {
      throw new ConfigError(
        'STRIPE_SECRET_KEY is a live key (real charges); use a test key (sk_test_...), ' +
          'or set ONCEFLOW_ALLOW_LIVE=1 if you really mean to move money',
      );
    }
  }
  const apiBaseRaw = env.STRIPE_API_BASE?.trim() || undefined;
  // No key: the sandbox's Stripe surface, with its test key.
  const apiBase = apiBaseRaw ? httpUrl('STRIPE_API_BASE', apiBaseRaw) : givenKey ? undefined : sandboxUrl;
  const webhookSecret = env.STRIPE_WEBHOOK_SECRET?.trim() || null;
  if (payment === 'stripe' && givenKey !== undefined && apiBase === undefined && webhookSecret === null) {
    throw new ConfigError(
      'PAYMENT_PROVIDER=stripe with a STRIPE_SECRET_KEY needs STRIPE_WEBHOOK_SECRET (the webhook ' +
        "endpoint's signing secret, whsec_...), or payment events can't be verified",
    );
  }
  const smtpPort = int(env, 'SMTP_PORT', 2525);
  const smtpUrl = env.SMTP_URL?.trim() || `smtp://127.0.0.1:${smtpPort}`;
  if (!/^smtps?:\/\//.test(smtpUrl)) {
    throw new ConfigError(`SMTP_URL must be an smtp:// or smtps:// URL, got ${JSON.stringify(smtpUrl)}`);
  }
  const from = env.RECEIPT_FROM?.trim() || 'Onceflow receipts <receipts@onceflow.invalid>';
  if (/[\r\n]/.test(from)) throw new ConfigError('RECEIPT_FROM must be one line');
  return {
    payment,
    email,
    stripe: {
      secretKey: givenKey ?? SANDBOX_STRIPE_KEY,
      apiBase,
      webhookSecret,
      keyWindowMs: duration(env, 'STRIPE_KEY_WINDOW_MS', 24 * 60 * 60 * 1000),
      searchLagMs: duration(env, 'STRIPE_SEARCH_LAG_MS', 60 * 60 * 1000),
    },
    smtp: {
      url: smtpUrl,
      from,
      uncertainPolicy: oneOf(
        env,
        'RECEIPT_UNCERTAIN_POLICY',
        ['at_least_once', 'at_most_once'] as const,
        'at_least_once',
      ),
    },
  };
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

function otlpEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (raw === undefined || raw.trim() === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, got ${JSON.stringify(raw)}`);
  }
  return raw.trim();
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, root = process.cwd()): Config {
  const ports = {
    temporal: int(env, 'TEMPORAL_PORT', 7233),
    temporalUi: int(env, 'TEMPORAL_UI_PORT', 8233),
    api: int(env, 'API_PORT', 3000),
    sandbox: int(env, 'SANDBOX_PORT', 4010),
    workerMetrics: int(env, 'WORKER_METRICS_PORT', 9464),
    workerSdkMetrics: 0,
    apiMetrics: int(env, 'API_METRICS_PORT', 9462),
  };
  ports.workerSdkMetrics = int(env, 'WORKER_SDK_METRICS_PORT', ports.workerMetrics + 1);
  const externalAddress = env.TEMPORAL_ADDRESS || undefined;
  const logLevel = (env.LOG_LEVEL ?? 'info') as Config['logLevel'];
  if (!['debug', 'info', 'warn', 'error'].includes(logLevel)) {
    throw new ConfigError(
      `LOG_LEVEL must be one of debug, info, warn, error; got ${JSON.stringify(logLevel)}`,
    );
  }
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
  } as Omit<Config, Credential> as Config;
  defineCredential(config, 'adminToken', env, exposure);
  defineCredential(config, 'webhookSecret', env, exposure);
  definePreviousWebhookSecret(config, env, exposure);
  defineCredential(config, 'apiKeySecret', env, exposure);
  return config;
}
