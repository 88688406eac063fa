/**
 * A DATABASE_URL that fails says what to do, from a real connection attempt:
 * a missing role gets the exact createuser / create role command (and running
 * that command fixes it), nothing listening gets how to start Postgres.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import pg from 'pg';
import { ensureDatabase, withDatabase } from '../../src/db/migrate.ts';
import { uniq } from '../support/env.ts';

const server = new URL(inject('postgresUrl'));
const role = uniq('norole')
  .toLowerCase()
  .replace(/[^a-z0-9_]/g, '_');
const admin = () => new pg.Client({ connectionString: withDatabase(server.toString(), 'postgres') });

afterAll(async () => {
  const c = admin();
  await c.connect();
  try {
    await c.query(`drop database if exists ${pg.escapeIdentifier(role)}`);
    await c.query(`drop role if exists ${pg.escapeIdentifier(role)}`);
  } finally {
    await c.end();
  }
});

describe('connect errors say what to do', () => {
  it('a role that does not exist: the exact command, and that command fixes it', async () => {
    const url = new URL(server.toString());
    url.username = role;
    url.password = '';
    url.pathname = `/${role}`;
    const host = url.hostname;
    const port = url.port || '5432';
    const failure = await ensureDatabase(url.toString()).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(failure?.message).toContain(`role "${role}" does not exist`);
    expect(failure?.message).toContain(`createuser -h ${host} -p ${port} -s ${role}`);
    const sql = /psql .* -c '([^']+)'/.exec(failure!.message)?.[1];
    expect(sql).toBe(`create role "${role}" login superuser`);

    // Run the advised statement as the server's admin; the same URL then works (its database is created).
    const c = admin();
    await c.connect();
    try {
      await c.query(sql!);
    } finally {
      await c.end();
    }
    await ensureDatabase(url.toString());
    const check = new pg.Client({ connectionString: url.toString() });
    await check.connect();
    try {
      expect((await check.query<{ u: string }>('select current_user as u')).rows[0]!.u).toBe(role);
    } finally {
      await check.end();
    }
  });

  it('nothing listening: how to start Postgres, or leave DATABASE_URL unset for the embedded one', async () => {
    const err = await ensureDatabase('postgres://postgres@127.0.0.1:1/onceflow').then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/ECONNREFUSED/);
    expect(err?.message).toContain('brew install postgresql@15');
    expect(err?.message).toContain('sudo apt-get install postgresql');
    expect(err?.message).toContain('embedded Postgres under .data/');
  });
});
