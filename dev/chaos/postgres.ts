/**
 * The chaos run's database. Preferably a PRIVATE throwaway Postgres cluster
 * (initdb in a temp folder, its own port), because only then is restarting
 * Postgres safe: the shared server other people and test runs use is never
 * restarted. Without a usable initdb, a throwaway database on the shared
 * server is used and the restart scenario is skipped.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { freePort } from '../../src/process/ports.ts';
import { createPool } from '../../src/db/index.ts';
import { createThrowawayDatabase } from '../../src/db/migrate.ts';
import { seedDemoData } from '../seed.ts';
import { Supervised, waitUntil } from './processes.ts';

export interface ChaosDatabase {
  /** The onceflow database the services use. */
  url: string;
  /** Same server, the maintenance database (for pg_terminate_backend and queries that must not die with it). */
  adminUrl: string;
  databaseName: string;
  /** Set when the cluster is private and may be restarted. */
  cluster: PrivateCluster | undefined;
  /** Why there is no private cluster (printed when the restart scenario is skipped). */
  whyShared: string | undefined;
  /** Stops the private cluster (its data folder too unless `keepFiles`) or drops the shared-server database. */
  close(keepFiles?: boolean): Promise<void>;
}

function findInitdb(): string | undefined {
  const base = '/usr/lib/postgresql';
  if (!fs.existsSync(base)) return undefined;
  const versions = fs
    .readdirSync(base)
    .filter((v) => fs.existsSync(path.join(base, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(base, versions[0], 'bin', 'initdb') : undefined;
}

function postgresIds(): { uid: number; gid: number } | undefined {
  // initdb refuses to run as root: as root, the cluster belongs to the `postgres` system user.
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

class PrivateCluster {
  readonly proc: Supervised;

  constructor(
    readonly dir: string,
    readonly port: number,
    bin: string,
    ids: { uid: number; gid: number } | undefined,
  ) {
    const socketDir = path.join(dir, 'sock');
    this.proc = new Supervised({
      name: 'postgres',
      command: path.join(bin, 'postgres'),
      args: [
        '-D',
        path.join(dir, 'data'),
        '-p',
        String(port),
        '-k',
        socketDir,
        '-c',
        'listen_addresses=127.0.0.1',
        // Throwaway data: durability settings off so 2 cores go to the system under test.
        '-c',
        'fsync=off',
        '-c',
        'synchronous_commit=off',
        '-c',
        'full_page_writes=off',
        '-c',
        'max_connections=300',
      ],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C' },
      cwd: dir,
      logFile: path.join(dir, 'postgres.log'),
      ready: (p) => waitUntil('private Postgres', () => canConnect(this.adminUrl), 30_000, p),
      ...(ids ?? {}),
    });
  }

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** A fast shutdown (what `pg_ctl restart -m fast` does), `downMs` of nothing, then the same cluster again. */
  async restart(downMs: number): Promise<void> {
    await this.proc.signalAndWait('SIGINT', 30_000);
    await new Promise((r) => setTimeout(r, downMs));
    await this.proc.start();
  }
}

async function canConnect(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function startPrivateCluster(runDir: string): Promise<PrivateCluster> {
  const initdb = findInitdb();
  if (!initdb) throw new Error('no /usr/lib/postgresql/*/bin/initdb');
  const ids = postgresIds();
  const dir = path.join(runDir, 'pg');
  fs.mkdirSync(path.join(dir, 'sock'), { recursive: true });
  if (ids) {
    // The run folder is private to us; postgres needs to traverse it and own its own folder.
    fs.chmodSync(runDir, 0o711);
    for (const d of [dir, path.join(dir, 'sock')]) fs.chownSync(d, ids.uid, ids.gid);
  }
  execFileSync(
    initdb,
    ['-D', path.join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync'],
    { stdio: 'pipe', ...(ids ?? {}), env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C' } },
  );
  const cluster = new PrivateCluster(dir, await freePort(), path.dirname(initdb), ids);
  await cluster.proc.start();
  return cluster;
}

export async function openChaosDatabase(opts: {
  runDir: string;
  sharedUrl: string;
  runId: string;
  /** Skip the private cluster (the caller asked for the shared server). */
  shared?: boolean;
  log: (line: string) => void;
}): Promise<ChaosDatabase> {
  const databaseName = `onceflow_chaos_${opts.runId}`;
  let cluster: PrivateCluster | undefined;
  let whyShared: string | undefined;
  if (opts.shared) {
    whyShared = '--shared-postgres';
    opts.log('--shared-postgres: using a throwaway database on the shared server');
  } else {
    try {
      cluster = await startPrivateCluster(opts.runDir);
      opts.log(`private Postgres cluster on 127.0.0.1:${cluster.port} (${cluster.dir})`);
    } catch (err) {
      whyShared = `no private Postgres cluster (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`;
      opts.log(`${whyShared}; using a throwaway database on the shared server`);
    }
  }
  const baseUrl = cluster ? cluster.adminUrl : opts.sharedUrl;
  let db: Awaited<ReturnType<typeof createThrowawayDatabase>>;
  try {
    db = await createThrowawayDatabase(baseUrl, databaseName);
  } catch (err) {
    await cluster?.proc.stop(10_000);
    throw err;
  }
  // The harness places orders with the local demo key: seed it, as `npm start` does on loopback.
  const seedPool = createPool(db.url, { max: 1 });
  try {
    await seedDemoData(seedPool, '127.0.0.1');
  } finally {
    await seedPool.end();
  }
  const adminUrl = new URL(db.url);
  adminUrl.pathname = '/postgres';
  return {
    url: db.url,
    adminUrl: adminUrl.toString(),
    databaseName,
    cluster,
    whyShared,
    async close(keepFiles = false) {
      if (cluster) {
        await cluster.proc.stop(15_000);
        if (!keepFiles) fs.rmSync(cluster.dir, { recursive: true, force: true });
      } else {
        await db.drop();
      }
    },
  };
}
