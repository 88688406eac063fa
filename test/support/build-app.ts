/**
 * `npm run build:app` and the workflow bundle from the compiled workflows, as the image's build
 * stage runs them, once per run. Two test files ask for it; a lock held by the directory's atomic
 * creation keeps them from wiping dist/app under each other, and the second finds it built.
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
  const built = path.join(inject('dataDir'), 'build-app.done');
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
    if (fs.existsSync(built)) return;
    await run('npm', ['run', '--silent', 'build:app'], { cwd: root });
    await run(process.execPath, [path.join(root, 'dist/app/src/cli/build-workflow-bundle.js')], {
      cwd: root,
    });
    fs.writeFileSync(built, '');
  } finally {
    fs.rmdirSync(lock);
  }
}
