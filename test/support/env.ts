/** Handles to the real services the global setup started for this run. */
import { inject } from 'vitest';
import type { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { createPool, type Pool } from '../../src/db/index.ts';

export const databaseUrl = () => inject('databaseUrl');
export const temporalAddress = () => inject('temporalAddress');
export const workflowBundlePath = () => inject('workflowBundlePath');

export function testPool(max = 10): Pool {
  return createPool(databaseUrl(), { max });
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
