/**
 * The sandbox's schema has its own migration chain (dev/sandbox/migrations/,
 * recorded in `sandbox.migrations`), out of the product's. A new product
 * database gets no sandbox tables; a database migrated before the split (the
 * product's 0003 created them) still migrates cleanly, and the sandbox's
 * chain adopts its tables and their rows.
 */
import fs from 'node:fs';
import { mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';
import { applySandboxMigrations } from '../../dev/sandbox/migrate.ts';
import { createThrowawayDatabase, migrate, MIGRATIONS_DIR, withDatabase } from '../../src/db/migrate.ts';
import { cloneName, dropDatabase } from '../support/database.ts';

const server = () => inject('postgresUrl');
const created: string[] = [];
afterAll(async () => {
  for (const name of created) await dropDatabase(server(), name);
});

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

const sandboxTables = (url: string) =>
  query<{ t: string }>(
    url,
    `select table_name as t from information_schema.tables where table_schema = 'sandbox' order by 1`,
  ).then((rows) => rows.map((r) => r.t));

const SANDBOX_TABLES = [
  'charges',
  'faults',
  'idempotency_keys',
  'messages',
  'migrations',
  'refunds',
  'webhook_config',
  'webhook_events',
];

it('the product chain holds no sandbox DDL', async () => {
  for (const name of await readdir(MIGRATIONS_DIR)) {
    if (!/^\d{4}_/.test(name)) continue;
    const code = (await readFile(path.join(MIGRATIONS_DIR, name), 'utf8')).replace(/--.*$/gm, '');
    expect(code, name).not.toMatch(/sandbox/i);
  }
});

it('a new database: the product chain creates no sandbox tables; the sandbox chain does, once', async () => {
  const name = cloneName(inject('databaseTemplate'), 'sbxnew');
  created.push(name);
  const { url } = await createThrowawayDatabase(server(), name);
  expect(await query(url, `select 1 from pg_namespace where nspname = 'sandbox'`)).toEqual([]);

  // Two sandboxes starting at once on one database: one applies, the other finds it done.
  const runs = await Promise.all([applySandboxMigrations(url), applySandboxMigrations(url)]);
  expect(runs.flat()).toEqual(['0001_sandbox', '0002_refunds']);
  expect(await sandboxTables(url)).toEqual(SANDBOX_TABLES);
  expect(await applySandboxMigrations(url)).toEqual([]);
});

it('a database migrated with the old 0003 still migrates, and the sandbox chain adopts its tables', async () => {
  const name = cloneName(inject('databaseTemplate'), 'sbxold');
  created.push(name);
  await query(withDatabase(server(), 'postgres'), `create database ${pg.escapeIdentifier(name)}`);
  const url = withDatabase(server(), name);

  // The product chain as it was before the split: 0003 created the sandbox's tables. Its DDL
  // was the sandbox chain's first file without IF NOT EXISTS.
  const dir = await mkdtemp(path.join(os.tmpdir(), 'onceflow-old-chain-'));
  try {
    for (const f of (await readdir(MIGRATIONS_DIR)).filter((n) => /^\d{4}_.*\.(?:sql|js)$/.test(n))) {
      if (f !== '0003_sandbox.sql') await symlink(path.join(MIGRATIONS_DIR, f), path.join(dir, f));
    }
    const sandboxDdl = fs.readFileSync(
      path.resolve(import.meta.dirname, '../../dev/sandbox/migrations/0001_sandbox.sql'),
      'utf8',
    );
    await writeFile(path.join(dir, '0003_sandbox.sql'), sandboxDdl.replaceAll(' IF NOT EXISTS', ''));
    await runner({
      databaseUrl: url,
      dir,
      direction: 'up',
      migrationsTable: 'pgmigrations',
      checkOrder: true,
      log: () => undefined,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  await query(
    url,
    `insert into sandbox.webhook_config (account, url) values ('acct_before_split', 'http://127.0.0.1:1/hook')`,
  );

  // Today's product chain: 0003 is recorded under the same name, so nothing is pending or out of order.
  expect(await migrate(url)).toEqual([]);
  expect(await applySandboxMigrations(url)).toEqual(['0001_sandbox', '0002_refunds']);
  expect(await sandboxTables(url)).toEqual(SANDBOX_TABLES);
  expect(await query(url, `select account, url from sandbox.webhook_config`)).toEqual([
    { account: 'acct_before_split', url: 'http://127.0.0.1:1/hook' },
  ]);
  expect(await applySandboxMigrations(url)).toEqual([]);
});
