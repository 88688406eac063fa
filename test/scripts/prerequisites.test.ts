/**
 * A missing SPIN or Chromium gets one clear line with the install command for
 * Debian and macOS (scripts/lib.sh, scripts/model-check.sh). Run with a PATH
 * that holds only the shell tools the scripts need, so neither tool nor
 * apt-get is found and nothing is installed.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '../..');
const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'prereq-path-'));
for (const tool of ['bash', 'dirname', 'id']) {
  const real = ['/usr/bin', '/bin'].map((d) => path.join(d, tool)).find((f) => fs.existsSync(f));
  if (!real) throw new Error(`${tool} not found in /usr/bin or /bin`);
  fs.symlinkSync(real, path.join(bin, tool));
}
afterAll(() => fs.rmSync(bin, { recursive: true, force: true }));

function bash(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      path.join(bin, 'bash'),
      args,
      { cwd: root, env: { PATH: bin, HOME: os.tmpdir() } },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}

describe('missing prerequisites', () => {
  it('SPIN: model-check stops with one line naming the Debian and macOS commands', async () => {
    const r = await bash(['scripts/model-check.sh']);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('sudo apt-get install spin');
    expect(lines[0]).toContain('brew install spin');
  });

  it('Chromium: one line naming the Debian and macOS commands (the UI test then fails, never skips)', async () => {
    const r = await bash(['-c', 'source scripts/lib.sh && unset CHROMIUM_PATH && ensure_chromium']);
    expect(r.code).toBe(0);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('sudo apt-get install chromium');
    expect(lines[0]).toContain('brew install --cask chromium');
  });
});
