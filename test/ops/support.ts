/** Runs the operator CLI as a child process against this run's services. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { testDatabaseUrl, temporalAddress } from '../support/env.ts';

const root = path.resolve(import.meta.dirname, '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function runOps(args: string[], env: { sandboxUrl: string }): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'scripts/ops.ts', ...args],
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
