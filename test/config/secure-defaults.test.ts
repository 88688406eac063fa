/**
 * Published local credentials (the admin token, the webhook secret, the demo
 * API keys) work on loopback only. Off loopback, every process that would use
 * one refuses to start and says which variable to set and how to make one.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, requireCredentials } from '../../src/config.ts';
import { isLoopbackHost } from '../../src/config/credentials.ts';
import { withTransaction } from '../../src/db/index.ts';
import { DEMO_TENANTS, assertNoDemoKeys } from '../../src/api/demo-keys.ts';
import { seedDemoData } from '../../dev/seed.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { findActiveKeyHashes } from '../../src/tenants/sql.ts';
import { freePort } from '../../src/process/ports.ts';
import { testDatabaseUrl, temporalAddress, testPool, uniq } from '../support/env.ts';
import { entryArgv } from '../support/processes.ts';

const root = path.resolve(import.meta.dirname, '../..');
/** An admin token as docs/DEPLOYING.md makes one (`openssl rand -hex 32`). */
const SECRET_A = randomBytes(32).toString('hex');
const SECRET_B = 'b'.repeat(64);

describe('credentials and BIND_HOST', () => {
  it('loopback binds keep the zero-config local defaults', () => {
    for (const host of [undefined, '127.0.0.1', '127.0.0.2', 'localhost', '::1', '[::1]']) {
      const config = loadConfig(host ? { BIND_HOST: host } : {});
      expect(config.adminToken).toBe('admin_local_dev_token');
      expect(config.webhookSecret).toBe('whsec_onceflow_local_dev');
      expect(() => requireCredentials(config, ['adminToken', 'webhookSecret'])).not.toThrow();
    }
    expect(isLoopbackHost('0.0.0.0')).toBe(false);
    expect(isLoopbackHost('10.0.0.5')).toBe(false);
    expect(isLoopbackHost('::')).toBe(false);
  });

  it('an exposed bind without explicit secrets refuses the defaults, naming the variable and how to make one', () => {
    for (const host of ['0.0.0.0', '::', '10.1.2.3']) {
      // Processes that use no credential (the worker, the ops CLI) still load their config.
      const config = loadConfig({ BIND_HOST: host });
      expect(() => config.adminToken).toThrow(ConfigError);
      expect(() => config.adminToken).toThrow(/ONCEFLOW_ADMIN_TOKEN.*openssl rand -hex 32/);
      expect(() => config.webhookSecret).toThrow(/WEBHOOK_SECRET.*openssl rand -hex 32/);
      expect(() => requireCredentials(config, ['adminToken', 'webhookSecret'])).toThrow(
        /ONCEFLOW_ADMIN_TOKEN[\s\S]*WEBHOOK_SECRET/,
      );
      // The config never carries the refused value anywhere it could be logged.
      expect(JSON.stringify(config)).not.toMatch(/admin_local_dev_token|whsec_onceflow_local_dev/);
    }
  });

  it('the published example values (README, docker-compose.yml) are refused off loopback even when set', () => {
    const config = loadConfig({
      BIND_HOST: '0.0.0.0',
      ONCEFLOW_ADMIN_TOKEN: 'admin_compose_change_me',
      WEBHOOK_SECRET: 'whsec_onceflow_local_dev',
    });
    expect(() => config.adminToken).toThrow(/ONCEFLOW_ADMIN_TOKEN is set to a published example value/);
    expect(() => config.webhookSecret).toThrow(/WEBHOOK_SECRET is set to a published example value/);
  });

  it('explicit secrets are used as given on any bind', () => {
    const config = loadConfig({
      BIND_HOST: '0.0.0.0',
      ONCEFLOW_ADMIN_TOKEN: SECRET_A,
      WEBHOOK_SECRET: SECRET_B,
    });
    expect(config.adminToken).toBe(SECRET_A);
    expect(config.webhookSecret).toBe(SECRET_B);
  });
});

/** Each sign that the API is reachable from other hosts, alone, with the bind on loopback. */
const EXPOSURE_SIGNS: [string, Record<string, string>, RegExp][] = [
  ['a non-loopback BIND_HOST', { BIND_HOST: '0.0.0.0' }, /BIND_HOST=0\.0\.0\.0 is not a loopback address/],
  [
    'API_TRUST_PROXY (a proxy in front of a loopback API)',
    { BIND_HOST: '127.0.0.1', API_TRUST_PROXY: '127.0.0.1' },
    /API_TRUST_PROXY is set: the API is reachable through a proxy/,
  ],
  ['NODE_ENV=production', { BIND_HOST: '127.0.0.1', NODE_ENV: 'production' }, /NODE_ENV=production/],
];

describe('exposure: any sign that the API is reachable from elsewhere refuses the public defaults', () => {
  it.each(EXPOSURE_SIGNS)('%s refuses the default credentials, naming the reason', (_sign, env, reason) => {
    const config = loadConfig(env);
    expect(config.exposure.exposed).toBe(true);
    expect(config.exposure.reasons.join('\n')).toMatch(reason);
    expect(() => config.adminToken).toThrow(ConfigError);
    expect(() => config.adminToken).toThrow(reason);
    expect(() => config.webhookSecret).toThrow(reason);
    // The published example values are refused the same way.
    const published = loadConfig({ ...env, ONCEFLOW_ADMIN_TOKEN: 'admin_compose_change_me' });
    expect(() => published.adminToken).toThrow(/published example value/);
  });

  it.each(EXPOSURE_SIGNS)(
    '%s refuses to seed the demo keys, and refuses them when active',
    async (_s, env, reason) => {
      const config = loadConfig(env);
      const pool = testPool(1);
      try {
        await expect(seedDemoData(pool, config.exposure)).rejects.toThrow(reason);
        await expect(assertNoDemoKeys(pool, config.exposure)).rejects.toThrow(reason);
      } finally {
        await pool.end();
      }
    },
  );

  it('several signs are all named', () => {
    const config = loadConfig({ BIND_HOST: '::', API_TRUST_PROXY: '10.0.0.0/8', NODE_ENV: 'production' });
    expect(config.exposure.reasons).toHaveLength(3);
    expect(() => config.adminToken).toThrow(/BIND_HOST=::.*API_TRUST_PROXY.*NODE_ENV=production/s);
  });

  it('loopback with no proxy and no production flag is the only unexposed case', async () => {
    for (const env of [{}, { NODE_ENV: 'development' }, { API_TRUST_PROXY: ' ' }, { NODE_ENV: 'test' }]) {
      const config = loadConfig(env);
      expect(config.exposure).toEqual({ exposed: false, reasons: [] });
      expect(config.adminToken).toBe('admin_local_dev_token');
    }
    const pool = testPool(1);
    try {
      await expect(assertNoDemoKeys(pool, loadConfig({}).exposure)).resolves.toBeUndefined();
    } finally {
      await pool.end();
    }
  });
});

describe('an explicit ONCEFLOW_ADMIN_TOKEN needs at least 128 bits of entropy', () => {
  const WEAK = [
    'short',
    'Tr0ub4dor&3',
    // 16 random hex digits: 64 bits, and "any 16 characters" used to pass.
    randomBytes(8).toString('hex'),
    'a'.repeat(64),
    'abc'.repeat(30),
    '0123456789abcdef'.repeat(4),
    `${'x'.repeat(60)}1234`,
  ];
  it.each(WEAK)('refuses %j at start-up on any bind, saying how to make one', (token) => {
    for (const env of [{}, { BIND_HOST: '0.0.0.0', API_TRUST_PROXY: '10.0.0.1' }]) {
      const config = loadConfig({ ...env, ONCEFLOW_ADMIN_TOKEN: token });
      expect(() => config.adminToken).toThrow(ConfigError);
      expect(() => config.adminToken).toThrow(/ONCEFLOW_ADMIN_TOKEN.*128 bits.*openssl rand -hex 32/s);
      expect(() => requireCredentials(config, ['adminToken'])).toThrow(/ONCEFLOW_ADMIN_TOKEN/);
      expect(JSON.stringify(config)).not.toContain(token);
    }
  });

  it.each([
    ['openssl rand -hex 32', randomBytes(32).toString('hex')],
    ['openssl rand -base64 32', randomBytes(32).toString('base64')],
    ['32 random bytes, base64url', randomBytes(32).toString('base64url')],
  ])('accepts a token made with %s', (_how, token) => {
    const config = loadConfig({ BIND_HOST: '0.0.0.0', ONCEFLOW_ADMIN_TOKEN: token });
    expect(config.adminToken).toBe(token);
  });

  it('the local default stays accepted on loopback (it is public, and refused everywhere else)', () => {
    expect(loadConfig({}).adminToken).toBe('admin_local_dev_token');
    expect(loadConfig({ ONCEFLOW_ADMIN_TOKEN: 'admin_local_dev_token' }).adminToken).toBe(
      'admin_local_dev_token',
    );
  });
});

describe('demo API keys', () => {
  it('are seeded (tests use the seed step), never by the production migrations', async () => {
    const migrations = fs
      .readdirSync(path.join(root, 'migrations'))
      .map((f) => fs.readFileSync(path.join(root, 'migrations', f), 'utf8'))
      .join('\n');
    expect(migrations).not.toMatch(/INSERT INTO api_keys/i);
    const pool = testPool(1);
    try {
      const active = await findActiveKeyHashes(
        pool,
        DEMO_TENANTS.map((t) => hashApiKey(t.key)),
      );
      expect(active).toHaveLength(2);
      // Seeding again changes nothing.
      expect(await seedDemoData(pool, '127.0.0.1')).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('the seed refuses an exposed bind; an exposed API refuses while they are active', async () => {
    const pool = testPool(1);
    try {
      await expect(seedDemoData(pool, '0.0.0.0')).rejects.toThrow(/Refusing to seed/);
      await expect(assertNoDemoKeys(pool, '127.0.0.1')).resolves.toBeUndefined();
      await expect(assertNoDemoKeys(pool, '0.0.0.0')).rejects.toThrow(
        /sk_test_acme_local, sk_test_globex_local.*not a loopback address/,
      );
    } finally {
      await pool.end();
    }
  });

  it('migration 0010 removes the published keys from a database an older 0005 seeded, and nothing else', async () => {
    const sql = fs.readFileSync(path.join(root, 'migrations/0010_drop_demo_keys.sql'), 'utf8');
    const pool = testPool(1);
    const other = hashApiKey(`sk_test_${uniq('keep')}`);
    try {
      await withTransaction(pool, async (tx) => {
        await tx.query(`insert into api_keys (key_hash, tenant_id, label) values ($1, 'acme', 'keep')`, [
          other,
        ]);
        await tx.query(sql);
        const hashes = [...DEMO_TENANTS.map((t) => hashApiKey(t.key)), other];
        expect(await findActiveKeyHashes(tx, hashes)).toEqual([other]);
        throw new Error('rollback'); // leave the run's seeded keys in place for other tests
      }).catch((err: unknown) => {
        if (!(err instanceof Error) || err.message !== 'rollback') throw err;
      });
    } finally {
      await pool.end();
    }
  });
});

function runApi(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, entryArgv('src/api/main.ts'), {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    // A process that did start (the defect) is stopped once it says so, so the test fails, not hangs.
    child.stdout.on('data', () => {
      if (output.includes('api listening')) child.kill('SIGTERM');
    });
    child.once('exit', (code) => resolve({ code, output }));
  });
}

describe('the API process off loopback', () => {
  const base = async () => ({
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: uniq('secure-defaults'),
    API_PORT: String(await freePort()),
    OUTBOX_RELAY: 'off',
    BIND_HOST: '0.0.0.0',
  });

  it('refuses to start without explicit secrets, naming each variable', async () => {
    const { code, output } = await runApi(await base());
    expect(code).toBe(1);
    expect(output).toMatch(/ONCEFLOW_ADMIN_TOKEN/);
    expect(output).toMatch(/WEBHOOK_SECRET/);
    expect(output).toMatch(/openssl rand -hex 32/);
    expect(output).not.toMatch(/api listening/);
  });

  it('on loopback behind a proxy (API_TRUST_PROXY), refuses the defaults and says why', async () => {
    const { code, output } = await runApi({
      ...(await base()),
      BIND_HOST: '127.0.0.1',
      API_TRUST_PROXY: '127.0.0.1',
    });
    expect(code).toBe(1);
    expect(output).toMatch(/ONCEFLOW_ADMIN_TOKEN/);
    expect(output).toMatch(/API_TRUST_PROXY is set: the API is reachable through a proxy/);
    expect(output).not.toMatch(/api listening/);
  });

  it('on loopback with a weak explicit admin token, refuses to start', async () => {
    const { code, output } = await runApi({
      ...(await base()),
      BIND_HOST: '127.0.0.1',
      ONCEFLOW_ADMIN_TOKEN: 'admin_token_0123456789',
    });
    expect(code).toBe(1);
    expect(output).toMatch(/ONCEFLOW_ADMIN_TOKEN.*128 bits/);
    expect(output).not.toMatch(/api listening/);
  });

  it('with explicit secrets, still refuses while the published demo keys are active in its database', async () => {
    const { code, output } = await runApi({
      ...(await base()),
      ONCEFLOW_ADMIN_TOKEN: SECRET_A,
      WEBHOOK_SECRET: SECRET_B,
      API_KEY_SECRET: randomBytes(32).toString('hex'),
    });
    expect(code).toBe(1);
    expect(output, output).toMatch(/demo API keys/);
    expect(output).not.toMatch(/api listening/);
  });
});
