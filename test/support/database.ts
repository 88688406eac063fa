/**
 * Databases for tests. The global setup migrates and seeds one template per
 * run; each test file works in a clone of it (`CREATE DATABASE ... TEMPLATE`),
 * so files running in parallel never see each other's rows.
 *
 * Postgres clones a template only while nobody is connected to it, so the
 * template refuses connections (ALLOW_CONNECTIONS false) once it is seeded:
 * a test that tried to use it would fail at connect, not make every clone
 * after it fail.
 */
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { describeConnectError, withDatabase } from '../../src/db/migrate.ts';

/** Postgres allows 63 bytes in a database name. */
const MAX_NAME = 63;

/** Runs `cb` on a short-lived connection to the server's `postgres` database. */
async function withAdmin<T>(serverUrl: string, cb: (client: pg.Client) => Promise<T>): Promise<T> {
  const url = withDatabase(serverUrl, 'postgres');
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    throw describeConnectError(err, url);
  }
  try {
    return await cb(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** `<template>_<label>_<random>`, within Postgres's name limit (so it keeps the run's prefix). */
export function cloneName(template: string, label = ''): string {
  const suffix = `_${label ? `${label}_` : ''}${randomBytes(3).toString('hex')}`;
  return `${template.slice(0, MAX_NAME - suffix.length)}${suffix}`;
}

/** Creates `name` as a copy of `template` (schema, migrations table and seed rows). */
export async function cloneDatabase(serverUrl: string, template: string, name: string): Promise<string> {
  await withAdmin(serverUrl, (c) =>
    c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)} TEMPLATE ${pg.escapeIdentifier(template)}`),
  );
  return withDatabase(serverUrl, name);
}

/** Drops `name` even with connections still open (spawned processes, pools a failed test left). */
export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await withAdmin(serverUrl, (c) =>
    c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`),
  );
}

/** Drops every database whose name starts with `prefix` (a run's template and whatever clones are left). */
export async function dropDatabasesWithPrefix(serverUrl: string, prefix: string): Promise<string[]> {
  return withAdmin(serverUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(
      'select datname from pg_database where starts_with(datname, $1)',
      [prefix],
    );
    for (const { datname } of rows) {
      await c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(datname)} WITH (FORCE)`);
    }
    return rows.map((r) => r.datname);
  });
}

/** Makes `name` refuse new connections, so it stays usable as a template. */
export async function closeTemplate(serverUrl: string, name: string): Promise<void> {
  await withAdmin(serverUrl, (c) =>
    c.query(`ALTER DATABASE ${pg.escapeIdentifier(name)} WITH ALLOW_CONNECTIONS false`),
  );
}
