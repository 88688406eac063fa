/** Runs the operator CLI as a child process against this run's services. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { expect } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import type { Ledger } from 'onceflow';
import { Operator } from '../../src/operator/index.ts';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { testDatabaseUrl, temporalAddress, uniq } from '../support/env.ts';
import { entryArgv } from '../support/processes.ts';

const root = path.resolve(import.meta.dirname, '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function runOps(args: string[], env: { sandboxUrl: string; taskQueue?: string }): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...entryArgv('src/cli/ops.ts'), ...args],
      {
        cwd: root,
        timeout: 60_000,
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          DATABASE_URL: testDatabaseUrl(),
          TEMPORAL_ADDRESS: temporalAddress(),
          TEMPORAL_NAMESPACE: 'default',
          TEMPORAL_UI_URL: 'http://temporal-ui.test',
          SANDBOX_URL: env.sandboxUrl,
          PROVIDER_TIMEOUT_MS: '1500',
          LOG_LEVEL: 'warn',
          ...(env.taskQueue ? { TEMPORAL_TASK_QUEUE: env.taskQueue } : {}),
        },
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

export function json<T>(result: CliResult): T {
  if (result.code !== 0) throw new Error(`ops exited ${result.code}: ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

/**
 * An Operator on the sandbox providers at `providerUrl` (default: port 9,
 * where nothing listens, for tests that make no provider call).
 */
export function testOperator(deps: {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  providerUrl?: string;
  providerTimeoutMs?: number;
  temporalUiUrl?: string;
  temporalTimeoutMs?: number;
}): Operator {
  const providers = {
    baseUrl: deps.providerUrl ?? 'http://127.0.0.1:9',
    timeoutMs: deps.providerTimeoutMs ?? 1_500,
  };
  return new Operator({
    pool: deps.pool,
    ledger: deps.ledger,
    temporal: deps.temporal,
    payments: createSandboxPaymentProvider(providers),
    email: createSandboxEmailProvider(providers),
    temporalUi: { url: deps.temporalUiUrl ?? 'http://ui.test/', namespace: 'default' },
    ...(deps.temporalTimeoutMs !== undefined ? { temporalTimeoutMs: deps.temporalTimeoutMs } : {}),
  });
}

/** An `unknown` charge record made directly through the ledger (its key is not an order step key). */
export async function unknownCharge(ledger: Ledger, prefix: string): Promise<string> {
  const key = uniq(prefix);
  await expect(
    ledger.runExternal(
      { tenantId: 'acme', operationType: 'payment.charge', key },
      { schemaVersion: 1, value: { amount: 100 } },
      {
        perform: async () => {
          throw new Error('connection reset');
        },
        reconcile: async () => ({ state: 'not_found' }),
      },
    ),
  ).rejects.toMatchObject({ code: 'outcome_unknown' });
  return key;
}
