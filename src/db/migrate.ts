/**
 * Schema management. Migrations are forward-only numbered `.sql` files in
 * `migrations/`, applied by node-pg-migrate (one transaction per file, an
 * advisory lock so two runners can't race).
 */
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import path from 'node:path';
import { SQLSTATE, isSqlState } from './index.ts';
import { PACKAGE_ROOT } from '../paths.ts';

/** The package's migrations/ (from the sources and from the compiled build alike). */
export const MIGRATIONS_DIR = path.join(PACKAGE_ROOT, 'migrations');

/**
 * A short-lived client outside any pool. A connection lost while it is idle
 * (Postgres restarted) surfaces as an 'error' event, which kills the process
 * without a listener; the next query (or end()) reports it instead.
 */
function standaloneClient(connectionString: string): pg.Client {
  const client = new pg.Client({ connectionString });
  client.on('error', () => undefined);
  return client;
}

/** Creates the database named in `databaseUrl` if it does not exist yet. */
export async function ensureDatabase(databaseUrl: string): Promise<void> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.replace(/^\//, ''));
  if (!name) throw new Error(`DATABASE_URL has no database name: ${redactUrl(databaseUrl)}`);
  const probe = standaloneClient(databaseUrl);
  try {
    await probe.connect();
    return;
  } catch (err) {
    if (!isSqlState(err, SQLSTATE.invalidCatalogName)) throw describeConnectError(err, databaseUrl);
  } finally {
    await probe.end().catch(() => undefined);
  }
  url.pathname = '/postgres';
  const admin = standaloneClient(url.toString());
  try {
    await admin.connect();
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } catch (err) {
    if (!isSqlState(err, '42P04')) throw describeConnectError(err, databaseUrl); // 42P04: created concurrently
  } finally {
    await admin.end().catch(() => undefined);
  }
}

export async function migrate(
  databaseUrl: string,
  log: (msg: string) => void = () => undefined,
): Promise<string[]> {
  const applied = await runner({
    databaseUrl,
    dir: MIGRATIONS_DIR,
    direction: 'up',
    migrationsTable: 'pgmigrations',
    // The runner takes every file in the directory as a migration; the rules (README.md) are not one.
    ignorePattern: '\\..*|.*\\.md',
    checkOrder: true,
    log: () => undefined,
    logger: { debug: () => undefined, info: () => undefined, warn: log, error: log },
  });
  return applied.map((m) => m.name);
}

export function redactUrl(databaseUrl: string): string {
  try {
    const url = new URL(databaseUrl);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '<unparseable DATABASE_URL>';
  }
}

export function describeConnectError(err: unknown, databaseUrl: string): Error {
  const message = err instanceof Error ? err.message : String(err);
  return new Error(
    `Cannot reach Postgres at ${redactUrl(databaseUrl)}: ${message}. ${connectAdvice(err, databaseUrl)}`,
    {
      cause: err,
    },
  );
}

/**
 * What to do about a failed connection, as commands to paste. Homebrew and
 * Postgres.app create a superuser named after the OS user and no `postgres`
 * role, so the default DATABASE_URL meets "role does not exist" there.
 */
function connectAdvice(err: unknown, databaseUrl: string): string {
  const url = new URL(databaseUrl);
  const role = decodeURIComponent(url.username) || 'postgres';
  const host = url.hostname || '127.0.0.1';
  const port = url.port || '5432';
  const code = (err as { code?: unknown }).code;
  const message = err instanceof Error ? err.message : String(err);
  const quoted = pg.escapeIdentifier(role);
  if (code === '28000' && /role .* does not exist/.test(message)) {
    return (
      `The role ${role} does not exist on that server. Create it as a superuser (onceflow creates its database and runs migrations): ` +
      `createuser -h ${host} -p ${port} -s ${role}   or   psql -h ${host} -p ${port} -d postgres -c 'create role ${quoted} login superuser'` +
      ` (run as a role that exists, e.g. your OS user on Homebrew/Postgres.app), ` +
      `or set DATABASE_URL to a role that exists, e.g. postgres://${process.env.USER ?? 'you'}@${host}:${port}/onceflow.`
    );
  }
  if (code === '28P01') {
    return (
      `The password for role ${role} was refused. Put the right one in DATABASE_URL (postgres://${role}:PASSWORD@${host}:${port}/...), ` +
      `or set it: psql -h ${host} -p ${port} -d postgres -c "alter role ${quoted} password '...'".`
    );
  }
  if (code === '28000') {
    return `The server refused ${role} from this host (pg_hba.conf). Allow it there, or use a role and host it accepts.`;
  }
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'ETIMEDOUT') {
    return (
      'Nothing answers there. Start Postgres (Debian: sudo apt-get install postgresql; macOS: brew install postgresql@15 && brew services start postgresql@15), ' +
      'set DATABASE_URL to a server you can reach, or leave DATABASE_URL unset with nothing on 127.0.0.1:5432 and `npm start` runs an embedded Postgres under .data/.'
    );
  }
  return 'Start Postgres or set DATABASE_URL to a server you can reach.';
}

/** The same server and credentials, another database. */
export function withDatabase(databaseUrl: string, name: string): string {
  const url = new URL(databaseUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * Creates and migrates a database of its own next to `baseUrl`'s (tests and
 * benchmarks never touch the user's data). `drop()` removes it, even with
 * connections still open.
 */
export async function createThrowawayDatabase(
  baseUrl: string,
  name: string,
): Promise<{ url: string; drop: () => Promise<void> }> {
  const adminUrl = withDatabase(baseUrl, 'postgres');
  const admin = async <T>(cb: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = standaloneClient(adminUrl);
    try {
      await client.connect();
    } catch (err) {
      throw describeConnectError(err, adminUrl);
    }
    try {
      return await cb(client);
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  await admin((c) => c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`));
  const url = withDatabase(baseUrl, name);
  const drop = () =>
    admin(async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    });
  try {
    await migrate(url);
  } catch (err) {
    await drop();
    throw err;
  }
  return { url, drop };
}
