/**
 * Obtains and runs a local Temporal server for development and tests.
 *
 * The CLI is found in this order: `TEMPORAL_CLI_PATH` (an explicit choice
 * wins), then `<toolsDir>/bin/temporal` (built here before), then a `temporal`
 * on the PATH at a supported version (`brew install temporal`), then built
 * from its Go module into `<toolsDir>/bin`.
 * Later CLI tags carry a `replace` directive that `go install` refuses, so the
 * version is pinned.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { assertPortFree, freePort, PortInUseError } from '../../src/process/ports.ts';
import { Supervisor } from '../../src/process/supervisor.ts';
import { pollUntil, waitForHttp } from '../wait.ts';

const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal';
export const TEMPORAL_CLI_VERSION = 'v1.5.1';
/** Custom search attributes the product upserts; registered on every dev server we start. */
export const SEARCH_ATTRIBUTES = {
  OrderStatus: 'Keyword',
  TenantId: 'Keyword',
  OrderLastError: 'Text',
} as const;

/**
 * SQLite settings for the dev server's state file. The CLI's default is a
 * rollback journal with `synchronous=full`: every Temporal write (each
 * workflow task, activity completion, search-attribute update) waits for
 * fsyncs, which caps the dev server at a few workflows a second on a small
 * machine. WAL with `synchronous=normal` syncs only at checkpoints.
 * Trade-off: the file survives a crash of the server process (kill -9); an
 * OS crash or power loss of the machine may lose the last commits before
 * the next checkpoint (never corrupts the file). Acceptable for a dev
 * server's state; production runs a real Temporal cluster.
 */
const DEV_SERVER_SQLITE_PRAGMAS: Readonly<Record<string, string>> = {
  journal_mode: 'wal',
  synchronous: 'normal',
};

/**
 * Dynamic config for the dev server. Eager activity dispatch: when a
 * workflow task schedules an activity on the worker's own task queue, the
 * server hands the activity task back in the workflow task's completion
 * instead of via matching and a second poll (the SDK asks for it by
 * default; the server flag is off unless set). Worker Versioning (Worker
 * Deployments, docs/UPGRADING.md) as on the Postgres-backed server
 * (deploy/temporal/dynamicconfig.yaml): on by default in server 1.29, set
 * explicitly because the deploy story depends on it. The transfer queue's
 * poll rate as there too (that file says why).
 */
const DEV_SERVER_DYNAMIC_CONFIG: Readonly<Record<string, string>> = {
  'system.enableActivityEagerExecution': 'true',
  'system.enableDeploymentVersions': 'true',
  'frontend.workerVersioningWorkflowAPIs': 'true',
  'matching.numTaskqueueReadPartitions': '1',
  'matching.numTaskqueueWritePartitions': '1',
  'history.transferProcessorMaxPollRPS': '1000',
};

type Log = (line: string) => void;

export class TemporalCliError extends Error {
  override name = 'TemporalCliError';
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function whichOnPath(cmd: string, env: NodeJS.ProcessEnv): string | undefined {
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (dir && isExecutable(path.join(dir, cmd))) return path.join(dir, cmd);
  }
  return undefined;
}

function which(cmd: string, env: NodeJS.ProcessEnv): string | undefined {
  const found = whichOnPath(cmd, env);
  if (found) return found;
  const goroot = '/usr/local/go/bin/' + cmd; // Go's default install location, often not on PATH
  return isExecutable(goroot) ? goroot : undefined;
}

/**
 * Whether `temporal --version` output is a CLI this project runs: the pinned
 * 1.5.x line (`temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)`), whose
 * `server start-dev` flags and embedded server (1.29) the dev server and tests
 * rely on. A build from source reports `0.0.0-DEV`; it is accepted when it
 * embeds the same server line, as a `go install` of the pinned tag does.
 */
export function supportedTemporalCliVersion(versionOutput: string): boolean {
  const m = /^temporal version (\S+) \(Server (\d+)\.(\d+)\./m.exec(versionOutput);
  if (!m) return false;
  const [, cli, serverMajor, serverMinor] = m;
  if (/^1\.5\.\d+$/.test(cli!)) return true;
  return cli === '0.0.0-DEV' && serverMajor === '1' && serverMinor === '29';
}

function versionOf(file: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(file, ['--version'], { timeout: 15_000 }, (err, stdout) => resolve(err ? '' : stdout.trim()));
  });
}

export async function ensureTemporalCli(options: {
  toolsDir: string;
  env?: NodeJS.ProcessEnv;
  log?: Log;
}): Promise<string> {
  const env = options.env ?? process.env;
  const log = options.log ?? ((l: string) => console.error(l));
  const explicit = env.TEMPORAL_CLI_PATH;
  if (explicit) {
    if (!isExecutable(explicit)) {
      throw new TemporalCliError(`TEMPORAL_CLI_PATH=${explicit} is not an executable file.`);
    }
    return explicit;
  }
  const binDir = path.join(options.toolsDir, 'bin');
  const target = path.join(binDir, 'temporal');
  if (isExecutable(target)) return target;

  const onPath = whichOnPath('temporal', env);
  if (onPath) {
    const version = await versionOf(onPath);
    if (supportedTemporalCliVersion(version)) {
      log(`[temporal] Using ${onPath} (${version})`);
      return onPath;
    }
    log(
      `[temporal] Not using ${onPath}: ${JSON.stringify(version || 'no --version output')} is not a supported version ` +
        `(the CLI ${TEMPORAL_CLI_VERSION.replace(/^v/, '')} line is: 1.5.x); building ${TEMPORAL_CLI_VERSION} instead.`,
    );
  }

  const go = which('go', env);
  if (!go) {
    throw new TemporalCliError(
      'No Temporal CLI found and no Go toolchain to build one.\n' +
        `  Either install Go (https://go.dev/doc/install) and re-run, so the project can build ${TEMPORAL_CLI_MODULE}@${TEMPORAL_CLI_VERSION},\n` +
        '  or install the Temporal CLI (https://docs.temporal.io/cli#install) and set TEMPORAL_CLI_PATH=/path/to/temporal,\n' +
        '  or point TEMPORAL_ADDRESS at a Temporal server you already run.',
    );
  }
  fs.mkdirSync(binDir, { recursive: true });
  log(
    `[temporal] Building the Temporal CLI ${TEMPORAL_CLI_VERSION} from its Go module into ${binDir} (first run only; this takes several minutes)...`,
  );
  await goInstallWithProgress({
    go,
    packages: [TEMPORAL_CLI_MODULE],
    version: TEMPORAL_CLI_VERSION,
    binDir,
    rename: { temporal: 'temporal' },
    env,
    log,
  });
  if (!isExecutable(target)) throw new TemporalCliError(`go install finished but ${target} is missing.`);
  log(`[temporal] Built ${target}`);
  return target;
}

export { isExecutable, which };

/**
 * `go install <packages>@<version>` (all from one module) with a progress
 * line every 10 s. Builds into a temporary GOBIN and renames each binary
 * (`rename`: name go gives it -> name in binDir), so an interrupted build
 * never leaves a half-written binary.
 */
export async function goInstallWithProgress(opts: {
  go: string;
  packages: string[];
  version: string;
  binDir: string;
  rename: Record<string, string>;
  env: NodeJS.ProcessEnv;
  log: Log;
  label?: string;
}): Promise<void> {
  const { go, binDir, env, log } = opts;
  const label = opts.label ?? 'temporal';
  const started = Date.now();
  const tmpBin = fs.mkdtempSync(path.join(binDir, '.build-'));
  const targets = opts.packages.map((p) => `${p}@${opts.version}`);
  const child = spawn(go, ['install', '-v', ...targets], {
    env: { ...env, GOBIN: tmpBin, GOFLAGS: env.GOFLAGS ?? '-mod=mod' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let downloaded = 0;
  let compiled = 0;
  let lastLine = '';
  const tail: string[] = [];
  const onData = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) {
      if (!line.trim()) continue;
      if (line.startsWith('go: downloading')) downloaded++;
      else compiled++;
      lastLine = line.trim();
      tail.push(line);
      if (tail.length > 30) tail.shift();
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const ticker = setInterval(() => {
    const secs = Math.round((Date.now() - started) / 1000);
    log(
      `[${label}] building... ${secs}s, ${downloaded} modules downloaded, ${compiled} packages compiled (${lastLine})`,
    );
  }, 10_000);
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (c) => resolve(c));
    });
    if (code !== 0) {
      throw new TemporalCliError(
        `go install ${targets.join(' ')} failed (exit ${code}). Last output:\n${tail.join('\n')}`,
      );
    }
    for (const [from, to] of Object.entries(opts.rename)) {
      fs.renameSync(path.join(tmpBin, from), path.join(binDir, to));
    }
  } finally {
    clearInterval(ticker);
    fs.rmSync(tmpBin, { recursive: true, force: true });
  }
}

export interface DevServerOptions {
  cli: string;
  port: number;
  /** UI port, or undefined for a headless server. */
  uiPort?: number;
  /** SQLite file; its folder is created. */
  dbFile: string;
  namespace?: string;
  logFile?: string;
  readyTimeoutMs?: number;
  log?: Log;
  /** SQLite pragmas for the state file; DEV_SERVER_SQLITE_PRAGMAS unless given. */
  sqlitePragmas?: Readonly<Record<string, string>>;
  /** Dynamic config values set on top of DEV_SERVER_DYNAMIC_CONFIG (a bench's lever changes one key). */
  dynamicConfig?: Readonly<Record<string, string>>;
  /** Where the server serves its own Prometheus metrics (loopback); a random port unless given. */
  metricsPort?: number;
}

export interface DevServer {
  address: string;
  uiUrl: string | undefined;
  process: ChildProcess;
  stop(): Promise<void>;
}

export async function startDevServer(opts: DevServerOptions): Promise<DevServer> {
  const log = opts.log ?? ((l: string) => console.error(l));
  await assertPortFree(opts.port, 'Temporal frontend');
  if (opts.uiPort !== undefined) await assertPortFree(opts.uiPort, 'Temporal UI');
  fs.mkdirSync(path.dirname(opts.dbFile), { recursive: true });
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    '--db-filename',
    opts.dbFile,
    '--namespace',
    opts.namespace ?? 'default',
    '--log-level',
    'warn',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([k, v]) => ['--search-attribute', `${k}=${v}`]),
    ...Object.entries(opts.sqlitePragmas ?? DEV_SERVER_SQLITE_PRAGMAS).flatMap(([k, v]) => [
      '--sqlite-pragma',
      `${k}=${v}`,
    ]),
    ...Object.entries({ ...DEV_SERVER_DYNAMIC_CONFIG, ...opts.dynamicConfig }).flatMap(([k, v]) => [
      '--dynamic-config-value',
      `${k}=${v}`,
    ]),
    ...(opts.uiPort !== undefined ? ['--ui-port', String(opts.uiPort)] : ['--headless']),
    ...(opts.metricsPort !== undefined ? ['--metrics-port', String(opts.metricsPort)] : []),
  ];
  const address = `127.0.0.1:${opts.port}`;
  const uiUrl = opts.uiPort !== undefined ? `http://127.0.0.1:${opts.uiPort}` : undefined;
  // The one process runner: its own process group, on a leash (it dies with this process).
  const server = new Supervisor({
    name: 'Temporal dev server',
    command: opts.cli,
    args,
    ...(opts.logFile ? { logFile: opts.logFile } : { onLine: () => undefined }),
    restart: false,
    stopGraceMs: 15_000,
    ready: async (sup) => {
      const exited = () => !sup.alive;
      await waitForTemporal(address, opts.readyTimeoutMs ?? 120_000, exited, log, opts.logFile);
      if (uiUrl)
        await waitForHttp(uiUrl, 60_000, { abandon: () => (exited() ? 'the server exited' : undefined) });
    },
  });
  const stop = async () => void (await server.stop());
  try {
    await server.start();
  } catch (err) {
    await stop();
    throw err;
  }
  return { address, uiUrl, process: server.process!, stop };
}

/**
 * Polls until the frontend answers a namespace describe. The SDK's own
 * connect wait is 5 s, too short for a cold start on 2 cores.
 */
export async function waitForTemporal(
  address: string,
  timeoutMs: number,
  exited: () => unknown = () => undefined,
  log: Log = () => undefined,
  logFile?: string,
  namespace = 'default',
): Promise<void> {
  await pollUntil(
    `Temporal at ${address}`,
    async () => {
      const connection = await Connection.connect({ address, connectTimeout: 2_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return true;
      } finally {
        await connection.close();
      }
    },
    {
      timeoutMs,
      abandon: () =>
        exited() ? `the server exited during startup${logFile ? `; see ${logFile}` : ''}` : undefined,
      onWaiting: () => log(`[temporal] waiting for the server at ${address}...`),
    },
  );
}

/**
 * For tests: a dev server on ports the OS says are free. A port can be taken
 * between asking and binding (by a parallel test run, or by the server's own
 * randomly chosen internal ports), so a bind failure is retried on new ports.
 */
export async function startDevServerOnFreePorts(
  opts: Omit<DevServerOptions, 'port' | 'uiPort'> & { ui: boolean; attempts?: number },
): Promise<DevServer> {
  const attempts = opts.attempts ?? 4;
  for (let attempt = 1; ; attempt++) {
    const logSize = opts.logFile && fs.existsSync(opts.logFile) ? fs.statSync(opts.logFile).size : 0;
    try {
      return await startDevServer({
        ...opts,
        port: await freePort(),
        ...(opts.ui ? { uiPort: await freePort() } : {}),
      });
    } catch (err) {
      const log =
        opts.logFile && fs.existsSync(opts.logFile)
          ? fs.readFileSync(opts.logFile, 'utf8').slice(logSize)
          : '';
      const portClash = err instanceof PortInUseError || /address already in use/i.test(log);
      if (!portClash || attempt >= attempts) throw err;
      (opts.log ?? ((l: string) => console.error(l)))(
        `[temporal] a port was taken while starting; retrying on new ports`,
      );
    }
  }
}
