/**
 * The package's tests need only a Postgres server: one throwaway database
 * per run, migrated by the package's own `migrate()` (what a user runs), and
 * dropped in teardown. Files share it and keep apart by unique scopes and
 * table names (test/support/env.ts `uniq`). No app code, no app setup.
 */
import type { TestProject } from 'vitest/node';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/index.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's migrated database (the package's tests only). */
    onceflowDatabaseUrl: string;
  }
}

const DEFAULT_SERVER_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

function withDatabase(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs `sql` on a short-lived connection to the server's maintenance database. */
async function admin(serverUrl: string, sql: string): Promise<void> {
  const url = withDatabase(serverUrl, 'postgres');
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    const where = new URL(url);
    throw new Error(
      `the package's tests need a Postgres server at ${where.host} (set DATABASE_URL): ${String(err)}`,
      { cause: err },
    );
  }
  try {
    await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export default async function setup(project: TestProject) {
  const serverUrl = process.env.DATABASE_URL || DEFAULT_SERVER_URL;
  const name = `onceflow_pkg_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const databaseUrl = withDatabase(serverUrl, name);
  // WITH (FORCE): a test that failed may have left connections (or a killed child's) behind.
  const drop = () => admin(serverUrl, `drop database if exists ${pg.escapeIdentifier(name)} with (force)`);

  await admin(serverUrl, `create database ${pg.escapeIdentifier(name)}`);
  try {
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    try {
      await migrate(pool);
    } finally {
      await pool.end();
    }
  } catch (err) {
    await drop();
    throw err;
  }
  project.provide('onceflowDatabaseUrl', databaseUrl);
  return drop;
}
