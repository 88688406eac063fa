/**
 * `npm run build:app` and the workflow bundle from the compiled workflows, as the image's build
 * stage runs them. Two test files run it; a lock held by the directory's atomic creation keeps
 * them from wiping dist/app under each other when they run in parallel.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { until } from './wait.ts';

const run = promisify(execFile);

export async function buildCompiledApp(root: string): Promise<void> {
  // In the run's own data folder: a lock left by a killed run never blocks the next.
  const lock = path.join(inject('dataDir'), 'build-app.lock');
  await until(
    'the build:app lock (another test file is building dist/app)',
    () => {
      try {
        fs.mkdirSync(lock);
        return true;
      } catch {
        return false;
      }
    },
    { timeoutMs: 600_000, intervalMs: 500 },
  );
  try {
    await run('npm', ['run', '--silent', 'build:app'], { cwd: root });
    await run(process.execPath, [path.join(root, 'dist/app/src/cli/build-workflow-bundle.js')], {
      cwd: root,
    });
  } finally {
    fs.rmdirSync(lock);
  }
}
