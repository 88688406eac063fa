/**
 * Finding the Temporal CLI before building one: a `temporal` on the PATH at a
 * supported version is used as is (no Go build: the tools folder stays
 * untouched), and TEMPORAL_CLI_PATH still wins over it. The CLI here is the
 * real one the test setup uses, linked into a temporary PATH folder.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { ensureTemporalCli, supportedTemporalCliVersion } from '../../dev/devserver/temporal.ts';

const realCli = path.join(loadConfig().toolsDir, 'bin', 'temporal');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'temporal-cli-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function pathDirWithCli(name: string): string {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir);
  fs.symlinkSync(realCli, path.join(dir, 'temporal'));
  return dir;
}

describe('ensureTemporalCli', () => {
  it('uses a supported temporal on the PATH and builds nothing', async () => {
    const pathDir = pathDirWithCli('path-bin');
    const toolsDir = path.join(tmp, 'empty-tools');
    const logs: string[] = [];
    const chosen = await ensureTemporalCli({
      toolsDir,
      env: { PATH: [pathDir, '/usr/bin', '/bin'].join(path.delimiter) },
      log: (l) => logs.push(l),
    });
    expect(chosen).toBe(path.join(pathDir, 'temporal'));
    expect(logs.join('\n')).toContain(`Using ${chosen}`);
    // A build creates <toolsDir>/bin before running go install; nothing was made.
    expect(fs.existsSync(toolsDir)).toBe(false);
  });

  it('TEMPORAL_CLI_PATH wins over the PATH', async () => {
    const pathDir = pathDirWithCli('path-bin-2');
    const explicit = pathDirWithCli('explicit');
    const chosen = await ensureTemporalCli({
      toolsDir: path.join(tmp, 'unused-tools'),
      env: {
        PATH: [pathDir, '/usr/bin', '/bin'].join(path.delimiter),
        TEMPORAL_CLI_PATH: path.join(explicit, 'temporal'),
      },
      log: () => undefined,
    });
    expect(chosen).toBe(path.join(explicit, 'temporal'));
  });
});

describe('supportedTemporalCliVersion (the accepted range: CLI 1.5.x, or a source build of server 1.29)', () => {
  it('accepts the CLI this project runs', () => {
    const real = execFileSync(realCli, ['--version'], { encoding: 'utf8' });
    expect(supportedTemporalCliVersion(real)).toBe(true);
  });

  it.each([
    ['temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)', true],
    ['temporal version 1.5.0 (Server 1.29.0, UI 2.41.0)', true],
    ['temporal version 0.0.0-DEV (Server 1.29.1, UI 2.42.1)', true],
    ['temporal version 1.3.0 (Server 1.27.1, UI 2.34.0)', false],
    ['temporal version 1.6.0 (Server 1.30.0, UI 2.43.0)', false],
    ['temporal version 0.0.0-DEV (Server 1.27.1, UI 2.34.0)', false],
    ['', false],
  ])('%j -> %s', (output, ok) => {
    expect(supportedTemporalCliVersion(output)).toBe(ok);
  });
});
