/**
 * Creates the ledger's schema (the `operations` table) in your database, and
 * nothing else. The files in the package's migrations/ run in name order,
 * each once, recorded in `onceflow_migrations` (apart from your own chain),
 * in one transaction under an advisory lock, so concurrent callers and
 * re-runs are safe. Or apply the same files with your own migration tool.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { withClient } from './db.ts';

/** The same from the sources (src/) and the build (dist/): both sit beside migrations/. */
const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations/', import.meta.url));
/** Any constant: it only has to differ from the user's own advisory locks. */
const MIGRATION_LOCK = 0x6f6e6365;

export interface MigrateOptions {
  /** The schema to create the ledger's table in; default the connection's first `search_path` schema. */
  schema?: string;
}

/**
 * Applies the ledger's migrations that `pool`'s database has not applied yet,
 * and returns the names it applied (none on a re-run).
 */
export async function migrate(pool: pg.Pool, options: MigrateOptions = {}): Promise<string[]> {
  const files = fs
    .readdirSync(MIGRATIONS_DIR)
    .filter((f) => f.endsWith('.sql'))
    .sort();
  return withClient(pool, async (client) => {
    await client.query('BEGIN');
    try {
      await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      if (options.schema) {
        const schema = client.escapeIdentifier(options.schema);
        await client.query(`create schema if not exists ${schema}`);
        await client.query(`set local search_path to ${schema}`);
      }
      await client.query(
        `create table if not exists onceflow_migrations (
           name text primary key, applied_at timestamptz not null default now())`,
      );
      const { rows } = await client.query<{ name: string }>('select name from onceflow_migrations');
      const done = new Set(rows.map((r) => r.name));
      const applied: string[] = [];
      for (const file of files) {
        const name = file.replace(/\.sql$/, '');
        if (done.has(name)) continue;
        await client.query(fs.readFileSync(`${MIGRATIONS_DIR}${file}`, 'utf8'));
        await client.query('insert into onceflow_migrations (name) values ($1)', [name]);
        applied.push(name);
      }
      await client.query('COMMIT');
      return applied;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  });
}
