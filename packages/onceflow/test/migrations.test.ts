/**
 * The package's schema: `migrate` applies each file once, under a lock, into
 * the schema asked for; and the package's migration is the app's ledger
 * migration statement for statement, so the two never drift.
 */
import { afterAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { migrate } from '../src/index.ts';
import { testPool, uniq } from './support/env.ts';

const packageMigration = path.resolve(import.meta.dirname, '../migrations/0001_ledger.sql');
/** The app's copy: the repository's own chain (node-pg-migrate) applies this one, not the package's. */
const appMigration = path.resolve(import.meta.dirname, '../../../migrations/0002_ledger.sql');

/** The statements of a SQL file, comments (whole-line and trailing `--`) and layout dropped. */
function statements(file: string): string[] {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .map((line) => line.replace(/--.*$/, ''))
    .join(' ')
    .split(';')
    .map((s) => s.replace(/\s+/g, ' ').replace(/\( /g, '(').replace(/ \)/g, ')').trim())
    .filter(Boolean);
}

describe('the migration files', () => {
  it("the package's 0001_ledger.sql and the app's 0002_ledger.sql have the same statements", () => {
    const pkg = statements(packageMigration);
    expect(pkg.length).toBeGreaterThan(0);
    expect(pkg[0]).toMatch(/^CREATE TABLE operations \(/);
    expect(pkg).toEqual(statements(appMigration));
  });

  it('statements() ignores comments and layout, and nothing else', () => {
    const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-sql-')), 'x.sql');
    try {
      fs.writeFileSync(tmp, '-- Why: a comment\nCREATE TABLE t (\n  a int, -- trailing\n  b text\n);\n');
      expect(statements(tmp)).toEqual(['CREATE TABLE t (a int, b text)']);
      fs.writeFileSync(tmp, 'CREATE TABLE t (a int, b varchar);');
      expect(statements(tmp)).not.toEqual(['CREATE TABLE t (a int, b text)']);
    } finally {
      fs.rmSync(path.dirname(tmp), { recursive: true, force: true });
    }
  });
});

describe('migrate', () => {
  const pool = testPool(6);
  const schemas: string[] = [];
  const freshSchema = () => {
    const schema = uniq('migrate').replace(/\W/g, '_').toLowerCase();
    schemas.push(schema);
    return schema;
  };
  afterAll(async () => {
    for (const schema of schemas)
      await pool.query(`drop schema if exists ${pg.escapeIdentifier(schema)} cascade`);
    await pool.end();
  });

  async function tablesIn(schema: string): Promise<string[]> {
    const { rows } = await pool.query<{ table_name: string }>(
      'select table_name from information_schema.tables where table_schema = $1 order by table_name',
      [schema],
    );
    return rows.map((r) => r.table_name);
  }

  it('creates the ledger in the schema asked for, once: a re-run applies nothing', async () => {
    const schema = freshSchema();
    expect(await migrate(pool, { schema })).toEqual(['0001_ledger']);
    expect(await migrate(pool, { schema })).toEqual([]);
    expect(await tablesIn(schema)).toEqual(['onceflow_migrations', 'operations']);
  });

  it('five concurrent runs apply each file exactly once (the advisory lock)', async () => {
    const schema = freshSchema();
    const runs = await Promise.all([1, 2, 3, 4, 5].map(() => migrate(pool, { schema })));
    expect(runs.flat()).toEqual(['0001_ledger']);
    const { rows } = await pool.query<{ name: string }>(
      `select name from ${pg.escapeIdentifier(schema)}.onceflow_migrations`,
    );
    expect(rows.map((r) => r.name)).toEqual(['0001_ledger']);
  });

  it('a failing file rolls back whole: nothing of the run is left', async () => {
    const schema = freshSchema();
    // The table the file creates is already there (another tool made it): the run fails and records nothing.
    await pool.query(`create schema ${pg.escapeIdentifier(schema)}`);
    await pool.query(`create table ${pg.escapeIdentifier(schema)}.operations (id int)`);
    await expect(migrate(pool, { schema })).rejects.toThrow(/already exists/);
    expect(await tablesIn(schema)).toEqual(['operations']);
  });
});
