/**
 * The Temporal server on Postgres (`TEMPORAL_BACKEND=postgres`): the
 * production shape of Temporal, run by the project on this machine.
 *
 * - Binaries: the server and its SQL schema tool from the `go.temporal.io/server`
 *   module, and the Temporal UI server from its own module (the version the
 *   pinned CLI embeds), built into `<toolsDir>/bin` on first use, or taken from
 *   TEMPORAL_SERVER_PATH / TEMPORAL_SQL_TOOL_PATH / TEMPORAL_UI_SERVER_PATH.
 * - Schema: the SQL files shipped in the server module (its folder in the Go
 *   module cache), or TEMPORAL_SCHEMA_DIR.
 * - Setup (idempotent): both databases created, versioned, upgraded.
 * - Config: a server YAML and a dynamic config file in the data dir,
 *   rewritten on every start; loopback ports only.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import { parse as parseYaml } from 'yaml';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common';
import { ensureDatabase, redactUrl, withDatabase } from '../../src/db/migrate.ts';
import { assertPortFree, freePort, PortInUseError } from '../../src/process/ports.ts';
import { Supervisor } from '../../src/process/supervisor.ts';
import { waitForHttp } from '../wait.ts';
import {
  goInstallWithProgress,
  isExecutable,
  SEARCH_ATTRIBUTES,
  TemporalCliError,
  TEMPORAL_CLI_VERSION,
  waitForTemporal,
  which,
  type DevServer,
} from './temporal.ts';

type Log = (line: string) => void;

const TEMPORAL_SERVER_MODULE = 'go.temporal.io/server';
/** The highest server release whose module builds with `go install` on Go 1.26 (no replace directive). */
export const TEMPORAL_SERVER_VERSION = 'v1.29.1';
const TEMPORAL_UI_SERVER_MODULE = 'github.com/temporalio/ui-server/v2';
/** The UI server version the pinned CLI (TEMPORAL_CLI_VERSION) embeds; its go.mod pins it. */
export const TEMPORAL_UI_SERVER_VERSION = 'v2.42.1';

/**
 * History shards: the unit of history ownership and of write concurrency in
 * the history service. The count is fixed when a cluster's database is first
 * used and can never change afterwards (a different count is refused; the
 * only way is a new cluster and a migration). 4 fits one history host on a
 * small machine: each shard holds a lease row and runs its own queues, so a
 * big count costs CPU and Postgres connections here for nothing. A cluster
 * that will grow to several history hosts should pick its final count
 * up front (Temporal suggests 512 or more for big clusters), see docs/OPERATIONS.md.
 */
export const TEMPORAL_HISTORY_SHARDS = 4;

/** A Temporal SQL store's connection pool, per service (frontend, history, matching, worker each open their own). */
export interface SqlPool {
  maxConns: number;
  maxIdleConns: number;
}

/** How the server reaches Postgres: its SQL plugin and the pool of each store. */
export interface PersistenceSettings {
  /** `postgres12` (the lib/pq driver) or `postgres12_pgx` (pgx). */
  plugin: 'postgres12' | 'postgres12_pgx';
  /** Persistence (history, matching, shards, namespaces). */
  default: SqlPool;
  visibility: SqlPool;
}

/**
 * The server's persistence settings (docs/DEPLOYING.md, "The Temporal server
 * on Postgres: settings"; docker-compose.yml sets the same). Each of the four
 * services opens its own pool per store, so the cluster holds up to
 * 4 x (8 + 3) = 44 connections to Postgres at peak (history and matching
 * hold most of them).
 * - pgx: its per-connection cache of prepared statements saves Postgres a
 *   parse and plan per statement (lib/pq sends every statement unprepared).
 * - maxIdleConns = maxConns: with fewer idle slots than connections, Go's
 *   pool closes every connection it cannot park, and the next burst opens a
 *   new one (a new Postgres backend, and pgx's statement cache lost). Under
 *   load that was a connection per few statements.
 */
export const TEMPORAL_PERSISTENCE: Readonly<PersistenceSettings> = {
  plugin: 'postgres12_pgx',
  default: { maxConns: 8, maxIdleConns: 8 },
  visibility: { maxConns: 3, maxIdleConns: 3 },
};

/** Where the server exposes its own metrics and Go pprof (loopback only). */
export interface ServerObservability {
  metricsPort?: number;
  pprofPort?: number;
}

/** Retention of closed workflows in the namespace we register (the dev server keeps 24 h). */
const NAMESPACE_RETENTION = '3 days';

/** The dynamic config file of every Postgres-backed server, compose's too (its comments say why each key). */
export const TEMPORAL_DYNAMIC_CONFIG_FILE = path.resolve(
  import.meta.dirname,
  '../../deploy/temporal/dynamicconfig.yaml',
);

/** The same settings as values, for callers that change one (bench/e2e.ts) and write the rest. */
export const TEMPORAL_SERVER_DYNAMIC_CONFIG: Readonly<Record<string, boolean | number>> = Object.fromEntries(
  Object.entries(
    parseYaml(fs.readFileSync(TEMPORAL_DYNAMIC_CONFIG_FILE, 'utf8')) as Record<
      string,
      { value: boolean | number }[]
    >,
  ).map(([key, [first]]) => [key, first!.value]),
);

export interface TemporalServerTools {
  server: string;
  sqlTool: string;
  uiServer: string;
  /** `.../schema/postgresql/v12` of the server module. */
  schemaDir: string;
}

function explicitBinary(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name];
  if (!value) return undefined;
  if (!isExecutable(value)) throw new TemporalCliError(`${name}=${value} is not an executable file.`);
  return value;
}

function requireGo(env: NodeJS.ProcessEnv, what: string): string {
  const go = which('go', env);
  if (!go) {
    throw new TemporalCliError(
      `No ${what} found and no Go toolchain to build it.\n` +
        '  Either install Go (https://go.dev/doc/install) and re-run,\n' +
        '  or set TEMPORAL_SERVER_PATH, TEMPORAL_SQL_TOOL_PATH, TEMPORAL_UI_SERVER_PATH and TEMPORAL_SCHEMA_DIR,\n' +
        '  or use the dev server (TEMPORAL_BACKEND=dev, the default).',
    );
  }
  return go;
}

/** Finds or builds the server, its SQL tool and the UI server; finds the schema files. */
export async function ensureTemporalServerTools(options: {
  toolsDir: string;
  env?: NodeJS.ProcessEnv;
  log?: Log;
}): Promise<TemporalServerTools> {
  const env = options.env ?? process.env;
  const log = options.log ?? ((l: string) => console.error(l));
  const binDir = path.join(options.toolsDir, 'bin');
  let server = explicitBinary(env, 'TEMPORAL_SERVER_PATH') ?? path.join(binDir, 'temporal-server');
  let sqlTool = explicitBinary(env, 'TEMPORAL_SQL_TOOL_PATH') ?? path.join(binDir, 'temporal-sql-tool');
  const uiServer = explicitBinary(env, 'TEMPORAL_UI_SERVER_PATH') ?? path.join(binDir, 'temporal-ui-server');

  if (!isExecutable(server) || !isExecutable(sqlTool)) {
    const go = requireGo(env, 'Temporal server');
    fs.mkdirSync(binDir, { recursive: true });
    log(
      `[temporal] Building the Temporal server ${TEMPORAL_SERVER_VERSION} and its SQL tool from the Go module into ${binDir} (first run only; this takes several minutes)...`,
    );
    const rename: Record<string, string> = {};
    const packages: string[] = [];
    if (!isExecutable(server)) {
      packages.push(`${TEMPORAL_SERVER_MODULE}/cmd/server`);
      rename.server = 'temporal-server';
    }
    if (!isExecutable(sqlTool)) {
      packages.push(`${TEMPORAL_SERVER_MODULE}/cmd/tools/sql`);
      rename.sql = 'temporal-sql-tool';
    }
    await goInstallWithProgress({ go, packages, version: TEMPORAL_SERVER_VERSION, binDir, rename, env, log });
    server = isExecutable(server) ? server : path.join(binDir, 'temporal-server');
    sqlTool = isExecutable(sqlTool) ? sqlTool : path.join(binDir, 'temporal-sql-tool');
    log(`[temporal] Built ${Object.values(rename).join(' and ')}`);
  }
  if (!isExecutable(uiServer)) {
    const go = requireGo(env, 'Temporal UI server');
    fs.mkdirSync(binDir, { recursive: true });
    log(
      `[temporal] Building the Temporal UI server ${TEMPORAL_UI_SERVER_VERSION} (the one CLI ${TEMPORAL_CLI_VERSION} embeds) into ${binDir} (first run only)...`,
    );
    await goInstallWithProgress({
      go,
      packages: [`${TEMPORAL_UI_SERVER_MODULE}/cmd/server`],
      version: TEMPORAL_UI_SERVER_VERSION,
      binDir,
      rename: { server: 'temporal-ui-server' },
      env,
      log,
    });
    log(`[temporal] Built ${uiServer}`);
  }
  return { server, sqlTool, uiServer, schemaDir: await findSchemaDir(env) };
}

/** The server module's Postgres schema folder: TEMPORAL_SCHEMA_DIR, or the module in Go's cache. */
async function findSchemaDir(env: NodeJS.ProcessEnv): Promise<string> {
  if (env.TEMPORAL_SCHEMA_DIR) return env.TEMPORAL_SCHEMA_DIR;
  const go = requireGo(env, 'Temporal schema folder (TEMPORAL_SCHEMA_DIR)');
  const { code, stdout, stderr } = await run(
    go,
    ['mod', 'download', '-json', `${TEMPORAL_SERVER_MODULE}@${TEMPORAL_SERVER_VERSION}`],
    { env: { ...env, GOFLAGS: env.GOFLAGS ?? '-mod=mod' } },
  );
  if (code !== 0) {
    throw new TemporalCliError(`go mod download ${TEMPORAL_SERVER_MODULE} failed: ${stderr || stdout}`);
  }
  const dir = (JSON.parse(stdout) as { Dir?: string }).Dir;
  const schemaDir = dir && path.join(dir, 'schema', 'postgresql', 'v12');
  if (!schemaDir || !fs.existsSync(path.join(schemaDir, 'temporal', 'versioned'))) {
    throw new TemporalCliError(`no Postgres schema found in ${dir ?? 'the downloaded module'}`);
  }
  return schemaDir;
}

function run(
  cmd: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface TemporalDatabases {
  /** A Postgres URL with the server and credentials; its database name is ignored. */
  postgresUrl: string;
  /** Persistence (the `default` store). */
  database: string;
  visibilityDatabase: string;
}

export interface SchemaSetupResult {
  database: string;
  created: boolean;
  /** Schema version before and after; before is undefined for a database without one. */
  versionBefore: string | undefined;
  versionAfter: string;
}

async function databaseExists(adminUrl: string, name: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: adminUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    return (rowCount ?? 0) > 0;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The schema version the SQL tool recorded, or undefined before setup-schema. */
async function schemaVersion(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rows } = await client.query<{ exists: boolean }>(
      `SELECT to_regclass('public.schema_version') IS NOT NULL AS exists`,
    );
    if (!rows[0]?.exists) return undefined;
    const version = await client.query<{ curr_version: string }>(
      'SELECT curr_version FROM schema_version LIMIT 1',
    );
    return version.rows[0]?.curr_version;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Creates both databases if missing, versions them (setup-schema 0.0, only
 * when no version table exists yet) and upgrades them to the schema of the
 * built server (update-schema; applies only newer versions). Running it
 * again changes nothing.
 */
export async function setupTemporalDatabases(opts: {
  sqlTool: string;
  schemaDir: string;
  databases: TemporalDatabases;
  log?: Log;
}): Promise<SchemaSetupResult[]> {
  const log = opts.log ?? (() => undefined);
  const url = new URL(opts.databases.postgresUrl);
  const toolEnv: NodeJS.ProcessEnv = {
    ...process.env,
    SQL_PLUGIN: 'postgres12',
    SQL_HOST: url.hostname,
    SQL_PORT: url.port || '5432',
    SQL_USER: decodeURIComponent(url.username || 'postgres'),
    SQL_PASSWORD: decodeURIComponent(url.password),
  };
  const results: SchemaSetupResult[] = [];
  for (const [database, folder] of [
    [opts.databases.database, 'temporal'],
    [opts.databases.visibilityDatabase, 'visibility'],
  ] as const) {
    const dbUrl = withDatabase(opts.databases.postgresUrl, database);
    const created = !(await databaseExists(withDatabase(opts.databases.postgresUrl, 'postgres'), database));
    await ensureDatabase(dbUrl);
    const versionBefore = await schemaVersion(dbUrl);
    const tool = async (args: string[]) => {
      const r = await run(opts.sqlTool, ['--db', database, ...args], {
        env: { ...toolEnv, SQL_DATABASE: database },
      });
      if (r.code !== 0) {
        throw new TemporalCliError(
          `temporal-sql-tool ${args.join(' ')} on ${redactUrl(dbUrl)} failed (exit ${r.code}):\n${r.stderr}${r.stdout}`,
        );
      }
    };
    if (versionBefore === undefined) await tool(['setup-schema', '-v', '0.0']);
    await tool(['update-schema', '-d', path.join(opts.schemaDir, folder, 'versioned')]);
    const versionAfter = (await schemaVersion(dbUrl)) ?? '0.0';
    if (created || versionBefore !== versionAfter) {
      log(
        `[temporal] database ${database}: ${created ? 'created, ' : ''}schema ${versionBefore ?? 'none'} -> ${versionAfter}`,
      );
    }
    results.push({ database, created, versionBefore, versionAfter });
  }
  return results;
}

/** Drops both databases (tests, benchmarks), even with connections still open. */
export async function dropTemporalDatabases(databases: TemporalDatabases): Promise<void> {
  const client = new pg.Client({ connectionString: withDatabase(databases.postgresUrl, 'postgres') });
  client.on('error', () => undefined);
  await client.connect();
  try {
    for (const name of [databases.database, databases.visibilityDatabase]) {
      await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Every port the server and the UI listen on (all on 127.0.0.1). */
export interface TemporalServerPorts {
  frontend: number;
  frontendHttp: number;
  history: number;
  matching: number;
  worker: number;
  frontendMembership: number;
  historyMembership: number;
  matchingMembership: number;
  workerMembership: number;
  ui: number;
}

/**
 * Ports for `npm start`, derived from TEMPORAL_PORT the way Temporal's own
 * configs lay them out (7233 frontend, 7234 history, 7235 matching, 7239
 * worker, 7243 HTTP, 6933.. membership), so they stay the same across
 * restarts (cluster membership rows in the database name host:port).
 */
export function derivedServerPorts(frontend: number, ui: number): TemporalServerPorts {
  const m = frontend > 1324 ? frontend - 300 : frontend + 300;
  const ports: TemporalServerPorts = {
    frontend,
    frontendHttp: frontend + 10,
    history: frontend + 1,
    matching: frontend + 2,
    worker: frontend + 6,
    frontendMembership: m,
    historyMembership: m + 1,
    matchingMembership: m + 2,
    workerMembership: m + 6,
    ui,
  };
  for (const [name, port] of Object.entries(ports)) {
    if (port > 65535)
      throw new TemporalCliError(`TEMPORAL_PORT=${frontend} puts the ${name} port past 65535`);
  }
  // Temporal stores membership ports in a smallint column.
  if (ports.workerMembership > 32767) {
    throw new TemporalCliError(
      `TEMPORAL_PORT=${frontend} puts the Temporal membership ports (TEMPORAL_PORT - 300...) above 32767, which Temporal cannot store; choose a TEMPORAL_PORT below 33062`,
    );
  }
  return ports;
}

/** What each port is, for "port in use" messages. */
export function describeServerPorts(ports: TemporalServerPorts): [number, string][] {
  return [
    [ports.frontend, 'Temporal frontend (TEMPORAL_PORT)'],
    [ports.frontendHttp, 'Temporal frontend HTTP (TEMPORAL_PORT + 10)'],
    [ports.history, 'Temporal history (TEMPORAL_PORT + 1)'],
    [ports.matching, 'Temporal matching (TEMPORAL_PORT + 2)'],
    [ports.worker, 'Temporal internal worker (TEMPORAL_PORT + 6)'],
    [ports.frontendMembership, 'Temporal frontend membership (TEMPORAL_PORT - 300)'],
    [ports.historyMembership, 'Temporal history membership (TEMPORAL_PORT - 299)'],
    [ports.matchingMembership, 'Temporal matching membership (TEMPORAL_PORT - 298)'],
    [ports.workerMembership, 'Temporal worker membership (TEMPORAL_PORT - 294)'],
    [ports.ui, 'Temporal UI (TEMPORAL_UI_PORT)'],
  ];
}

/** Resolves true if 127.0.0.1:port can be bound right now. */
function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/**
 * Free ports for tests and benchmarks (distinct from each other). The
 * membership ports are stored in a Postgres smallint column
 * (cluster_membership.rpc_port), so they must stay below 32768, where the
 * OS's ephemeral ports never are: they are picked at random in 20000-32767
 * and checked.
 */
export async function freeServerPorts(): Promise<TemporalServerPorts> {
  const taken = new Set<number>();
  const next = async () => {
    for (;;) {
      const p = await freePort();
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  const low = async () => {
    for (;;) {
      const p = 20_000 + Math.floor(Math.random() * 12_768);
      if (!taken.has(p) && (await canBind(p))) {
        taken.add(p);
        return p;
      }
    }
  };
  return {
    frontend: await next(),
    frontendHttp: await next(),
    history: await next(),
    matching: await next(),
    worker: await next(),
    frontendMembership: await low(),
    historyMembership: await low(),
    matchingMembership: await low(),
    workerMembership: await low(),
    ui: await next(),
  };
}

const q = (s: string | number) => JSON.stringify(String(s)); // a JSON string is a YAML scalar

export interface ServerConfigFiles {
  /** Folder passed as the server's config dir; holds `onceflow.yaml`. */
  configDir: string;
  configFile: string;
  dynamicConfigFile: string;
  uiConfigDir: string;
}

/**
 * Writes the server config, its dynamic config and the UI server's config
 * into `dir` (mode 0600: the server config holds the Postgres password).
 * Deterministic for the same inputs.
 */
export function writeServerConfig(opts: {
  dir: string;
  ports: TemporalServerPorts;
  databases: TemporalDatabases;
  namespace: string;
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
  historyShards?: number;
  dynamicConfig?: Readonly<Record<string, boolean | number>>;
  /** TEMPORAL_PERSISTENCE when unset. */
  persistence?: PersistenceSettings;
  /** Loopback ports for the server's Prometheus endpoint and Go pprof (benchmarks); off when unset. */
  observability?: ServerObservability;
}): ServerConfigFiles {
  const { ports } = opts;
  const url = new URL(opts.databases.postgresUrl);
  const configDir = path.join(opts.dir, 'temporal-server');
  const uiConfigDir = path.join(opts.dir, 'temporal-ui');
  fs.mkdirSync(configDir, { recursive: true });
  fs.mkdirSync(uiConfigDir, { recursive: true });
  const configFile = path.join(configDir, 'onceflow.yaml');
  const dynamicConfigFile = path.join(configDir, 'dynamicconfig.yaml');

  // Small pools (TEMPORAL_PERSISTENCE): the server runs four services in one
  // process, each with its own pool per store, on a Postgres shared with the product.
  const store = (database: string, { maxConns, maxIdleConns }: SqlPool) =>
    [
      `      sql:`,
      `        pluginName: ${q(persistence.plugin)}`,
      `        databaseName: ${q(database)}`,
      `        connectAddr: ${q(`${url.hostname}:${url.port || '5432'}`)}`,
      `        connectProtocol: "tcp"`,
      `        user: ${q(decodeURIComponent(url.username || 'postgres'))}`,
      `        password: ${q(decodeURIComponent(url.password))}`,
      `        maxConns: ${maxConns}`,
      `        maxIdleConns: ${maxIdleConns}`,
      `        maxConnLifetime: "1h"`,
    ].join('\n');
  const service = (grpc: number, membership: number, http?: number) =>
    [
      `    rpc:`,
      `      grpcPort: ${grpc}`,
      `      membershipPort: ${membership}`,
      `      bindOnLocalHost: true`,
      ...(http !== undefined ? [`      httpPort: ${http}`] : []),
    ].join('\n');
  const persistence = opts.persistence ?? TEMPORAL_PERSISTENCE;
  const { metricsPort, pprofPort } = opts.observability ?? {};
  const observability = [
    ...(pprofPort !== undefined ? [`  pprof:`, `    port: ${pprofPort}`, `    host: "127.0.0.1"`] : []),
    ...(metricsPort !== undefined
      ? [
          `  metrics:`,
          `    prometheus:`,
          `      timerType: "histogram"`,
          `      listenAddress: ${q(`127.0.0.1:${metricsPort}`)}`,
        ]
      : []),
  ]
    .map((line) => `${line}\n`)
    .join('');
  const yaml = `# Written by onceflow (dev/devserver/temporal-server.ts) on every start; edits are overwritten.
log:
  stdout: true
  level: ${q(opts.logLevel ?? 'warn')}

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  # Fixed for the life of the cluster; see TEMPORAL_HISTORY_SHARDS and docs/OPERATIONS.md.
  numHistoryShards: ${opts.historyShards ?? TEMPORAL_HISTORY_SHARDS}
  datastores:
    postgres-default:
${store(opts.databases.database, persistence.default)}
    postgres-visibility:
${store(opts.databases.visibilityDatabase, persistence.visibility)}

global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
${observability}
services:
  frontend:
${service(ports.frontend, ports.frontendMembership, ports.frontendHttp)}
  history:
${service(ports.history, ports.historyMembership)}
  matching:
${service(ports.matching, ports.matchingMembership)}
  worker:
${service(ports.worker, ports.workerMembership)}

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: ${q(`127.0.0.1:${ports.frontend}`)}

dcRedirectionPolicy:
  policy: "noop"

archival:
  history:
    state: "disabled"
  visibility:
    state: "disabled"

namespaceDefaults:
  archival:
    history:
      state: "disabled"
    visibility:
      state: "disabled"

dynamicConfigClient:
  filepath: ${q(dynamicConfigFile)}
  pollInterval: "10s"
`;
  // Unless a caller changes a setting, the committed file itself (compose mounts the same one).
  const dynamic = opts.dynamicConfig
    ? Object.entries(opts.dynamicConfig)
        .map(([key, value]) => `${key}:\n  - value: ${JSON.stringify(value)}\n    constraints: {}\n`)
        .join('')
    : fs.readFileSync(TEMPORAL_DYNAMIC_CONFIG_FILE, 'utf8');
  const ui = `# Written by onceflow on every start.
temporalGrpcAddress: ${q(`127.0.0.1:${ports.frontend}`)}
host: "127.0.0.1"
port: ${ports.ui}
enableUi: true
defaultNamespace: ${q(opts.namespace)}
cors:
  cookieInsecure: true
notifyOnNewVersion: false
hideLogs: true
`;
  fs.writeFileSync(configFile, yaml, { mode: 0o600 });
  fs.chmodSync(configFile, 0o600);
  fs.writeFileSync(dynamicConfigFile, dynamic);
  fs.writeFileSync(path.join(uiConfigDir, 'onceflow.yaml'), ui);
  return { configDir, configFile, dynamicConfigFile, uiConfigDir };
}

export interface TemporalServerOptions {
  tools: TemporalServerTools;
  databases: TemporalDatabases;
  ports: TemporalServerPorts;
  /** Config files and logs go here. */
  dataDir: string;
  namespace?: string;
  /** Without a UI server when false. */
  ui?: boolean;
  readyTimeoutMs?: number;
  log?: Log;
  dynamicConfig?: Readonly<Record<string, boolean | number>>;
  historyShards?: number;
  persistence?: PersistenceSettings;
  observability?: ServerObservability;
}

/**
 * One of the server's processes, run by the one supervisor: its own process group, output to
 * `logFile`, never restarted, on a leash (the group ends when this process is gone, however
 * it died). start() resolves once `ready` does.
 */
function serverProcess(
  name: string,
  command: string,
  args: string[],
  logFile: string,
  ready: (exited: () => boolean) => Promise<void>,
): Supervisor {
  return new Supervisor({
    name,
    command,
    args,
    logFile,
    restart: false,
    stopGraceMs: 20_000,
    ready: (sup) => ready(() => !sup.alive),
  });
}

/**
 * Sets up the databases, writes the config, starts the server (and the UI
 * server), waits until it answers, registers the namespace and the search
 * attributes. The returned handle stops both process groups.
 */
export async function startTemporalServer(opts: TemporalServerOptions): Promise<DevServer> {
  const log = opts.log ?? ((l: string) => console.error(l));
  const namespace = opts.namespace ?? 'default';
  const withUi = opts.ui ?? true;
  for (const [port, what] of describeServerPorts(opts.ports)) {
    if (what.startsWith('Temporal UI') && !withUi) continue;
    await assertPortFree(port, what);
  }
  fs.mkdirSync(opts.dataDir, { recursive: true });
  await setupTemporalDatabases({
    sqlTool: opts.tools.sqlTool,
    schemaDir: opts.tools.schemaDir,
    databases: opts.databases,
    log,
  });
  const files = writeServerConfig({
    dir: opts.dataDir,
    ports: opts.ports,
    databases: opts.databases,
    namespace,
    ...(opts.dynamicConfig ? { dynamicConfig: opts.dynamicConfig } : {}),
    ...(opts.historyShards !== undefined ? { historyShards: opts.historyShards } : {}),
    ...(opts.persistence ? { persistence: opts.persistence } : {}),
    ...(opts.observability ? { observability: opts.observability } : {}),
  });
  const logFile = path.join(opts.dataDir, 'temporal-server.log');
  const address = `127.0.0.1:${opts.ports.frontend}`;
  const uiUrl = withUi ? `http://127.0.0.1:${opts.ports.ui}` : undefined;
  const server = serverProcess(
    'Temporal server',
    opts.tools.server,
    ['--root', files.configDir, '--config', '.', '--env', 'onceflow', '--allow-no-auth', 'start'],
    logFile,
    async (exited) => {
      const timeoutMs = opts.readyTimeoutMs ?? 180_000;
      await waitForTemporal(address, timeoutMs, exited, log, logFile, 'temporal-system');
      await registerNamespace(address, namespace, log);
    },
  );
  const ui = uiUrl
    ? serverProcess(
        'Temporal UI server',
        opts.tools.uiServer,
        ['--root', files.uiConfigDir, '--config', '.', '--env', 'onceflow', 'start'],
        path.join(opts.dataDir, 'temporal-ui.log'),
        (exited) =>
          waitForHttp(uiUrl, 60_000, { abandon: () => (exited() ? 'the UI server exited' : undefined) }),
      )
    : undefined;
  const stop = async () => {
    await ui?.stop();
    await server.stop();
  };
  try {
    await server.start();
    await ui?.start();
  } catch (err) {
    await stop();
    throw err;
  }
  return { address, uiUrl, process: server.process!, stop };
}

/**
 * For tests and benchmarks: the server on ports the OS says are free. A port
 * can be taken between asking and binding, so a bind failure is retried on
 * new ports (the database setup is idempotent, so a retry only re-checks it).
 */
export async function startTemporalServerOnFreePorts(
  opts: Omit<TemporalServerOptions, 'ports'> & { attempts?: number },
): Promise<DevServer> {
  const attempts = opts.attempts ?? 4;
  const logFile = path.join(opts.dataDir, 'temporal-server.log');
  for (let attempt = 1; ; attempt++) {
    const logSize = fs.existsSync(logFile) ? fs.statSync(logFile).size : 0;
    try {
      return await startTemporalServer({ ...opts, ports: await freeServerPorts() });
    } catch (err) {
      const log = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').slice(logSize) : '';
      const portClash = err instanceof PortInUseError || /address already in use/i.test(log);
      if (!portClash || attempt >= attempts) throw err;
      (opts.log ?? ((l: string) => console.error(l)))(
        '[temporal] a port was taken while starting; retrying on new ports',
      );
    }
  }
}

const INDEXED_VALUE_TYPE = { Text: 1, Keyword: 2 } as const;

/** Registers the namespace and our search attributes if missing (idempotent). */
async function registerNamespace(address: string, namespace: string, log: Log): Promise<void> {
  const connection = await Connection.connect({ address, connectTimeout: 10_000 });
  try {
    try {
      await connection.workflowService.registerNamespace({
        namespace,
        workflowExecutionRetentionPeriod: msToTs(NAMESPACE_RETENTION),
      });
      log(`[temporal] registered namespace ${namespace} (retention ${NAMESPACE_RETENTION})`);
    } catch (err) {
      if ((err as { code?: number }).code !== 6) throw err; // 6: ALREADY_EXISTS
    }
    // The frontend's namespace cache refreshes every few seconds.
    await waitForTemporal(address, 60_000, undefined, log, undefined, namespace);
    const existing = await connection.operatorService.listSearchAttributes({ namespace });
    const missing = Object.entries(SEARCH_ATTRIBUTES).filter(
      ([name]) => !(name in (existing.customAttributes ?? {})),
    );
    if (missing.length) {
      await connection.operatorService.addSearchAttributes({
        namespace,
        searchAttributes: Object.fromEntries(missing.map(([name, type]) => [name, INDEXED_VALUE_TYPE[type]])),
      });
      log(`[temporal] registered search attributes ${missing.map(([n]) => n).join(', ')}`);
    }
  } finally {
    await connection.close();
  }
}
