/** Handles to the real services the global setup started for this run. */
import { inject } from 'vitest';
import type { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import pg from 'pg';
import { createPool, type Pool } from '../../src/db/index.ts';
import { withDatabase } from '../../src/db/migrate.ts';
import { cloneDatabase, cloneName, dropDatabase } from './database.ts';

let fileDatabase: string | undefined;

/**
 * The name of this test file's own database. test/setup/runtime.ts creates it
 * (a clone of the run's template) before the file's first hook and drops it
 * after its last; the name is fixed on first use, so a pool created while the
 * module loads already points at it.
 */
function testDatabaseName(): string {
  fileDatabase ??= cloneName(inject('databaseTemplate'));
  return fileDatabase;
}

/**
 * Forgets the previous file's database name: test/setup/runtime.ts calls it first in each file,
 * since a worker that runs several files (isolate: false) keeps this module between them.
 */
export function beginTestFile(): void {
  fileDatabase = undefined;
}

/** This test file's own database: migrated and seeded, shared with no other file. Pass it to spawned processes. */
export const testDatabaseUrl = (): string => withDatabase(inject('postgresUrl'), testDatabaseName());

/** Creates this file's database (test/setup/runtime.ts, before the file's hooks). */
export async function createTestDatabase(): Promise<void> {
  await cloneDatabase(inject('postgresUrl'), inject('databaseTemplate'), testDatabaseName());
}

/** Drops this file's database, connections and all (test/setup/runtime.ts, after the file's hooks). */
export async function dropTestDatabase(): Promise<void> {
  if (fileDatabase) await dropDatabase(inject('postgresUrl'), fileDatabase);
}

export const temporalAddress = () => inject('temporalAddress');
export const workflowBundlePath = () => inject('workflowBundlePath');
/** The bundle with the tracing interceptors (a worker with tracing on builds the same). */
export const tracedWorkflowBundlePath = () => inject('tracedWorkflowBundlePath');

export function testPool(max = 10, url = testDatabaseUrl()): Pool {
  return createPool(url, { max });
}

/** A client of the run's dev server, through the SDK's test environment (no server of its own). */
export async function temporalClient(): Promise<{ client: Client; close: () => Promise<void> }> {
  const env = await TestWorkflowEnvironment.createFromExistingServer({
    address: temporalAddress(),
    namespace: 'default',
  });
  return { client: env.client, close: () => env.teardown() };
}

export async function nativeConnection(): Promise<NativeConnection> {
  return NativeConnection.connect({ address: temporalAddress() });
}

/** A unique name for this test, so parallel tests never share keys, tenants or task queues. */
export function uniq(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * One more database besides the file's own (another clone of the template),
 * for tests whose connections get killed (pg_terminate_backend must hit only
 * the processes under test, not the file's own pools). The global teardown
 * drops it if `drop()` never ran.
 */
export async function ownDatabase(
  label: string,
): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  const server = inject('postgresUrl');
  const name = cloneName(inject('databaseTemplate'), label);
  const url = await cloneDatabase(server, inject('databaseTemplate'), name);
  return { url, name, drop: () => dropDatabase(server, name) };
}

/** An empty database of this run (the run's prefix, so the global teardown drops it if `drop()` never ran). */
export async function emptyDatabase(label: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const server = inject('postgresUrl');
  const name = cloneName(inject('databaseTemplate'), label);
  const admin = createPool(withDatabase(server, 'postgres'), { max: 1 });
  try {
    await admin.query(`create database ${pg.escapeIdentifier(name)}`);
  } finally {
    await admin.end();
  }
  return { url: withDatabase(server, name), drop: () => dropDatabase(server, name) };
}

/** Terminates every connection to `database` but the caller's own (what a Postgres restart does to them). */
export async function terminateConnections(database: string): Promise<number> {
  const admin = createPool(withDatabase(inject('postgresUrl'), 'postgres'), { max: 1 });
  try {
    const { rows } = await admin.query<{ n: number }>(
      `select count(*) filter (where pg_terminate_backend(pid))::int as n
         from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
      [database],
    );
    return rows[0]?.n ?? 0;
  } finally {
    await admin.end();
  }
}
