/** Handles to the real services the global setup started for this run. */
import { inject } from 'vitest';
import type { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { createPool, type Pool } from '../../src/db/index.ts';
import { createThrowawayDatabase, withDatabase } from '../../src/db/migrate.ts';

export const databaseUrl = () => inject('databaseUrl');
export const temporalAddress = () => inject('temporalAddress');
export const workflowBundlePath = () => inject('workflowBundlePath');

export function testPool(max = 10, url = databaseUrl()): Pool {
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
 * A migrated database of this test file's own, next to the run's database.
 * For tests that must see (or fault) only their own rows and connections:
 * the outbox relay starts every due row in its database, and
 * pg_terminate_backend must hit only this file's processes.
 */
export async function ownDatabase(
  prefix: string,
): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  const base = new URL(databaseUrl());
  const name = `${decodeURIComponent(base.pathname.slice(1))}_${prefix}_${Math.random().toString(36).slice(2, 8)}`;
  const db = await createThrowawayDatabase(databaseUrl(), name.slice(0, 63));
  return { ...db, name: name.slice(0, 63) };
}

/** Terminates every connection to `database` but the caller's own (what a Postgres restart does to them). */
export async function terminateConnections(database: string): Promise<number> {
  const admin = createPool(withDatabase(databaseUrl(), 'postgres'), { max: 1 });
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
