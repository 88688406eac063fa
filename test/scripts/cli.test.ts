/**
 * Every script in package.json that takes arguments (scripts/*.ts, src/cli/*.ts, bench/*.ts;
 * the ops CLI and the chaos script with cases of their own) behaves like a CLI, run as a child
 * process (src/ from the run's compiled build, as the image runs it; the rest through tsx, as npm does):
 * --help exits 0 with usage, an unknown flag prints usage and exits 2, and
 * under --json every line on stdout and stderr is JSON, errors included.
 */
import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { testDatabaseUrl, uniq } from '../support/env.ts';
import { entryArgv } from '../support/processes.ts';

const root = path.resolve(import.meta.dirname, '../..');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(script: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...entryArgv(script), ...args],
      // Unreachable services by default: nothing here may touch a real database by accident.
      {
        cwd: root,
        env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none', ...env },
        timeout: 60_000,
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const lines = (text: string) => text.split('\n').filter((l) => l.trim() !== '');
const allJson = (text: string) => lines(text).map((l) => JSON.parse(l) as Record<string, unknown>);

const scripts = [
  { file: 'scripts/demo.ts', json: false },
  { file: 'src/cli/api-key.ts', json: true },
  { file: 'src/cli/migrate.ts', json: true },
  { file: 'scripts/ensure-temporal.ts', json: true },
  { file: 'scripts/client-generate.ts', json: true },
  { file: 'scripts/seed.ts', json: true },
  { file: 'bench/ledger.ts', json: false },
  { file: 'bench/e2e.ts', json: false },
  { file: 'bench/growth.ts', json: false },
  { file: 'bench/peer.ts', json: false },
  { file: 'bench/http-client.ts', json: false },
];

describe.each(scripts)('$file', ({ file }) => {
  it('answers --help with usage on stdout and exit 0', async () => {
    const r = await run(file, ['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: /);
    expect(r.stdout).toContain('--help');
    expect(r.stderr).toBe('');
  });

  it('refuses an unknown flag with usage on stderr and exit 2', async () => {
    const r = await run(file, ['--no-such-flag']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown option '--no-such-flag'");
    expect(r.stderr).toContain('Usage: ');
    expect(r.stdout).toBe('');
  });
});

describe.each(scripts.filter((s) => s.json))('$file --json', ({ file }) => {
  it('under --json, help and usage errors are JSON', async () => {
    const help = await run(file, ['--help', '--json']);
    expect(help.code).toBe(0);
    expect(allJson(help.stdout)).toEqual([{ usage: expect.stringMatching(/^Usage: /) }]);

    const bad = await run(file, ['--json', '--no-such-flag']);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe('');
    expect(allJson(bad.stderr)).toEqual([
      {
        error: expect.objectContaining({ code: 'usage', message: expect.stringContaining('--no-such-flag') }),
      },
    ]);
  });
});

describe('scripts/chaos.ts (its own parser)', () => {
  it('answers --help with exit 0 and refuses an unknown flag with usage and exit 2', async () => {
    const help = await run('scripts/chaos.ts', ['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run chaos/i);
    const bad = await run('scripts/chaos.ts', ['--no-such-flag']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--no-such-flag/);
    expect(bad.stderr).toMatch(/usage: npm run chaos/i);
    expect(bad.stdout).toBe('');
  });
});

describe('src/cli/ops.ts: per-command options and help (commander)', () => {
  it("--help lists the commands; <command> --help shows that command's own options", async () => {
    const top = await run('src/cli/ops.ts', ['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/^Usage: ops <command>/);
    for (const c of ['list', 'show', 'reconcile', 'resolve', 'redrive', 'attention', 'audit']) {
      expect(top.stdout).toContain(c);
    }
    const reconcile = await run('src/cli/ops.ts', ['reconcile', '--help']);
    expect(reconcile.code).toBe(0);
    expect(reconcile.stdout).toMatch(/^Usage: ops reconcile \[options\] <tenant> <type> <key>/);
    expect(reconcile.stdout).toContain('--reason <text>');
    expect(reconcile.stdout).not.toContain('--outcome');
    const resolve = await run('src/cli/ops.ts', ['resolve', '--help']);
    expect(resolve.stdout).toContain('--outcome <outcome>');
    expect(resolve.stderr).toBe('');
  });

  it("an unknown flag, a missing argument or a bad value prints that command's usage and exits 2", async () => {
    for (const args of [
      ['list', '--no-such-flag'],
      ['show', 'acme', 'payment.charge'],
      ['list', '--state', 'weird'],
      ['audit', '--limit', '0'],
      ['resolve', 'acme', 'payment.charge', 'k', '--outcome', 'succeeded'],
      ['redrive', 'acme', 'ord_1', '--reason', '  '],
    ]) {
      const r = await run('src/cli/ops.ts', args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout, args.join(' ')).toBe('');
      expect(r.stderr, args.join(' ')).toContain(`Usage: ops ${args[0]} [options]`);
    }
    const none = await run('src/cli/ops.ts', []);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/a command is required/);
    const unknown = await run('src/cli/ops.ts', ['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command 'frobnicate'/);
  });

  it('under --json, usage errors and failures are one JSON error object', async () => {
    const bad = await run('src/cli/ops.ts', ['list', '--no-such-flag', '--json']);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe('');
    expect(allJson(bad.stderr)).toEqual([
      {
        error: {
          code: 'usage',
          message: expect.stringContaining('--no-such-flag'),
          usage: expect.stringMatching(/^Usage: ops list/),
        },
      },
    ]);
    const help = await run('src/cli/ops.ts', ['audit', '--help', '--json']);
    expect(help.code).toBe(0);
    expect(allJson(help.stdout)).toEqual([{ usage: expect.stringMatching(/^Usage: ops audit/) }]);
    // Postgres unreachable: a failure, as JSON, exit 1.
    const down = await run('src/cli/ops.ts', ['audit', '--json']);
    expect(down.code).toBe(1);
    expect(down.stdout).toBe('');
    expect(allJson(down.stderr)).toEqual([
      { error: { code: 'failed', message: expect.stringContaining('127.0.0.1:1') } },
    ]);
  });
});

describe('--json outputs', () => {
  it('a failure (Postgres unreachable) is one JSON error line and exit 1', async () => {
    for (const [file, args] of [
      ['src/cli/migrate.ts', ['--json']],
      ['scripts/seed.ts', ['--json']],
      ['src/cli/api-key.ts', ['acme', '--json']],
    ] as const) {
      const r = await run(file, [...args]);
      expect(r.code, `${file}: ${r.stderr}`).toBe(1);
      expect(r.stdout).toBe('');
      const errs = allJson(r.stderr);
      expect(errs).toHaveLength(1);
      expect(errs[0]).toMatchObject({ error: { message: expect.stringContaining('127.0.0.1:1') } });
    }
  });

  it('api-key prints the key as a JSON result, notes as JSON lines', async () => {
    const tenant = uniq('cli').toLowerCase();
    const r = await run('src/cli/api-key.ts', [tenant, '--create-tenant', '--json'], {
      DATABASE_URL: testDatabaseUrl(),
    });
    expect(r.code, r.stderr).toBe(0);
    const [result, ...rest] = allJson(r.stdout);
    expect(rest).toEqual([]);
    expect(result).toMatchObject({
      tenantId: tenant,
      createdTenant: true,
      key: expect.stringMatching(/^sk_test_/),
    });
    expect(allJson(r.stderr)).toEqual([expect.objectContaining({ tenantId: tenant, createdTenant: true })]);

    const text = await run('src/cli/api-key.ts', [tenant], { DATABASE_URL: testDatabaseUrl() });
    expect(text.code, text.stderr).toBe(0);
    expect(lines(text.stdout)).toEqual([expect.stringMatching(/^sk_test_[\w-]+$/)]);
  });

  it('api-key refuses a bad tenant id as a usage error (exit 2)', async () => {
    const r = await run('src/cli/api-key.ts', ['Not Valid!']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('tenant-id');
  });

  it('demo refuses a non-positive number as a usage error (exit 2)', async () => {
    const r = await run('scripts/demo.ts', ['--orders', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('must be a positive integer');
  });
});

describe('npm start (dev/start.ts) command line', () => {
  // Usage errors and --help exit before anything starts (no ports, no database, no children).
  it('answers --help with the process-count options and exit 0', async () => {
    const r = await run('dev/start.ts', ['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/--workers <n>/);
    expect(r.stdout).toMatch(/--api-processes <n>/);
  });

  it('refuses an unknown flag and a non-positive count with usage and exit 2', async () => {
    const unknown = await run('dev/start.ts', ['--bogus']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown option '--bogus'");
    expect(unknown.stderr).toContain('Usage: start');
    const zero = await run('dev/start.ts', ['--workers', '0']);
    expect(zero.code).toBe(2);
    expect(zero.stderr).toContain('must be a positive integer');
  });
});
