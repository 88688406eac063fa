/**
 * `onceflow/migrations`: creates the ledger's schema (the `operations` table)
 * in a library user's database, and nothing of the order system's.
 *
 * The ledger's SQL files are the order system's own (migrations/0002_ledger.sql;
 * no later migration touches `operations`), applied by the same well-kept tool,
 * node-pg-migrate (one transaction per file, an advisory lock so two runners
 * can't race), but recorded in a migrations table of their own,
 * `onceflow_ledger_migrations`, so they never mix with the user's chain.
 * Re-running applies nothing; a new ledger migration joins LEDGER_MIGRATIONS.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import type { Pool } from '../db/index.ts';

/** The ledger's migration files, in order (all in the package's `migrations/`). */
export const LEDGER_MIGRATIONS = ['0002_ledger.sql'] as const;

/** Where applyLedgerMigrations records what it applied. */
export const LEDGER_MIGRATIONS_TABLE = 'onceflow_ledger_migrations';

/**
 * The package root: the nearest directory above this module with a
 * package.json. The same from the sources (src/lib/) and from the compiled
 * library (dist/lib/src/lib/), which has no package.json of its own.
 */
function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('onceflow: cannot find the package root of the ledger migrations');
    dir = parent;
  }
  return dir;
}

export interface LedgerMigrationOptions {
  /** The schema to create the ledger's table in (and to record the migrations in); default `public`. */
  schema?: string;
}

/**
 * Applies the ledger's migrations that `pool`'s database has not applied yet;
 * returns the names it applied (none on a re-run). Safe to run concurrently.
 */
export async function applyLedgerMigrations(
  pool: Pool,
  options: LedgerMigrationOptions = {},
): Promise<string[]> {
  const root = packageRoot();
  const client = await pool.connect();
  try {
    const applied = await runner({
      dbClient: client,
      dir: LEDGER_MIGRATIONS.map((file) => path.join(root, 'migrations', file)),
      useGlob: true,
      direction: 'up',
      migrationsTable: LEDGER_MIGRATIONS_TABLE,
      ...(options.schema ? { schema: options.schema, createSchema: true } : {}),
      checkOrder: true,
      log: () => undefined,
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: () => undefined,
        error: () => undefined,
      },
    });
    return applied.map((m) => m.name);
  } finally {
    client.release();
  }
}
