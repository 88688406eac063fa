/**
 * The `onceflow` command (package.json `bin`, bin/onceflow.js) against real
 * services: --version, api-key create/list/revoke on this file's Postgres
 * database, and `ops` over the admin API (a real Fastify server with the admin
 * routes on the real stack) with an operator token and no database access.
 * Also: `--json` stays pure JSON on stdout through `npx` and `npm run -s`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { testDatabaseUrl, testPool, uniq } from '../support/env.ts';
import { opsRoutes } from '../../src/operator/index.ts';
import { generateOperatorToken, hashOperatorToken, insertOperator } from '../../src/operator/accounts-sql.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { findTenantByKeyHash } from '../../src/tenants/sql.ts';
import { testOperator, unknownCharge } from '../operator/support.ts';

const root = path.resolve(import.meta.dirname, '../..');
const version = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string })
  .version;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command from the repo root. DATABASE_URL points nowhere unless a test gives one. */
function run(file: string, args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      {
        cwd: root,
        timeout: 90_000,
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
          LOG_LEVEL: 'warn',
          ...env,
        },
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}
const onceflow = (args: string[], env?: Record<string, string | undefined>) =>
  run(process.execPath, [path.join(root, 'bin/onceflow.js'), ...args], env);

describe('onceflow --version and usage', () => {
  it('npx onceflow --version prints the package version, alone, on stdout', async () => {
    const r = await run('npx', ['--no-install', 'onceflow', '--version']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${version}\n`);
  });

  it('--help lists the subcommands; an unknown one is a usage error (exit 2, stderr only)', async () => {
    const help = await onceflow(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: onceflow <command>/);
    for (const sub of ['ops', 'api-key', 'demo']) expect(help.stdout).toContain(sub);

    const bad = await onceflow(['frobnicate']);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe('');
    expect(bad.stderr).toContain("unknown command 'frobnicate'");

    const badJson = await onceflow(['frobnicate', '--json']);
    expect(badJson.code).toBe(2);
    expect(JSON.parse(badJson.stderr)).toMatchObject({ error: { code: 'usage' } });
  });

  it('passes a subcommand its exit status and output: ops with Postgres down fails as JSON', async () => {
    const r = await onceflow(['ops', 'audit', '--json']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(JSON.parse(r.stderr)).toMatchObject({ error: { code: expect.any(String) } });
  });
});

describe('onceflow api-key create | list | revoke', () => {
  it('creates a key, lists it without the secret, revokes it by ID, and the API would refuse it', async () => {
    const db = { DATABASE_URL: testDatabaseUrl() };
    const tenant = uniq('keys').toLowerCase();
    const created = await onceflow(
      ['api-key', 'create', tenant, '--create-tenant', '--label', 'ci', '--json'],
      db,
    );
    expect(created.code, created.stderr).toBe(0);
    const c = JSON.parse(created.stdout) as { id: string; key: string; tenantId: string };
    expect(c).toMatchObject({ tenantId: tenant, key: expect.stringMatching(/^sk_test_/) });
    expect(c.id).toBe(hashApiKey(c.key).slice(0, 12));

    const listed = await onceflow(['api-key', 'list', '--tenant', tenant, '--json'], db);
    expect(listed.code, listed.stderr).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual([
      {
        id: c.id,
        tenantId: tenant,
        label: 'ci',
        state: 'active',
        createdAt: expect.any(String),
        revokedAt: null,
      },
    ]);
    // Neither the key nor its whole hash is ever printed.
    expect(listed.stdout).not.toContain(c.key);
    expect(listed.stdout).not.toContain(hashApiKey(c.key));
    const text = await onceflow(['api-key', 'list', '--tenant', tenant], db);
    expect(text.stdout).toMatch(new RegExp(`^${c.id}\\t${tenant}\\tactive\\t`, 'm'));

    const pool = testPool(1);
    try {
      expect(await findTenantByKeyHash(pool, hashApiKey(c.key))).toBe(tenant);
      const revoked = await onceflow(['api-key', 'revoke', c.id, '--json'], db);
      expect(revoked.code, revoked.stderr).toBe(0);
      expect(JSON.parse(revoked.stdout)).toMatchObject({
        id: c.id,
        revoked: true,
        revokedAt: expect.any(String),
      });
      expect(await findTenantByKeyHash(pool, hashApiKey(c.key))).toBeNull();

      // Again, by the key itself: already revoked, and the first time is kept.
      const again = await onceflow(['api-key', 'revoke', c.key, '--json'], db);
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({
        id: c.id,
        revoked: false,
        revokedAt: (JSON.parse(revoked.stdout) as { revokedAt: string }).revokedAt,
      });
    } finally {
      await pool.end();
    }
  });

  it('refuses an unknown ID (exit 1) and a malformed one (usage, exit 2)', async () => {
    const db = { DATABASE_URL: testDatabaseUrl() };
    const missing = await onceflow(['api-key', 'revoke', 'ffffffffffff', '--json'], db);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stderr)).toMatchObject({ error: { code: 'not_found' } });
    const short = await onceflow(['api-key', 'revoke', 'abc'], db);
    expect(short.code).toBe(2);
    expect(short.stderr).toContain('key ID');
  });
});

describe('onceflow ops --api-url (no database access)', () => {
  let stack: OrderStack;
  let app: FastifyInstance;
  let apiUrl: string;
  let token: string;
  let operatorName: string;
  let tmp: string;
  // No DATABASE_URL at all: the CLI must not need one over the API.
  const api = (args: string[], env: Record<string, string | undefined> = {}) =>
    onceflow(['ops', ...args, '--api-url', apiUrl], {
      DATABASE_URL: undefined,
      ONCEFLOW_OPERATOR_TOKEN: token,
      ...env,
    });

  beforeAll(async () => {
    stack = await startOrderStack({ startWorker: false });
    app = Fastify().withTypeProvider<TypeBoxTypeProvider>();
    await app.register(
      opsRoutes({
        operator: testOperator({
          pool: stack.pool,
          ledger: stack.ledger,
          temporal: stack.client,
          providerUrl: stack.sandbox.url,
        }),
        adminToken: 'admin_test_token_0123456789abcdef',
        operators: stack.pool,
        authFailure: { max: 1000, windowMs: 60_000 },
      }),
    );
    apiUrl = await app.listen({ host: '127.0.0.1', port: 0 });
    operatorName = uniq('alice');
    token = generateOperatorToken();
    await insertOperator(stack.pool, { name: operatorName, tokenHash: hashOperatorToken(token) });
    tmp = mkdtempSync(path.join(os.tmpdir(), 'onceflow-cli-'));
  });
  afterAll(async () => {
    await app?.close();
    await stack?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('attention: pure JSON on stdout, through npx and through npm run -s', async () => {
    const direct = await api(['attention', '--json']);
    expect(direct.code, direct.stderr).toBe(0);

    const viaNpm = await run('npm', ['run', '-s', 'ops', '--', 'attention', '--json', '--api-url', apiUrl], {
      DATABASE_URL: undefined,
      ONCEFLOW_OPERATOR_TOKEN: token,
    });
    expect(viaNpm.code, viaNpm.stderr).toBe(0);
    // The list spans the run's Temporal namespace, which other files' orders enter and leave
    // meanwhile: the two answers are compared by shape, not by value.
    const entry = { workflowId: expect.any(String), status: expect.any(String) };
    for (const out of [direct.stdout, viaNpm.stdout]) {
      const listed = JSON.parse(out) as unknown[];
      expect(listed).toBeInstanceOf(Array);
      for (const item of listed) expect(item).toMatchObject(entry);
    }

    // Without -s npm writes its banner to stdout first; the CLI says how to avoid it, on stderr.
    const loud = await run('npm', ['run', 'ops', '--', 'attention', '--json', '--api-url', apiUrl], {
      DATABASE_URL: undefined,
      ONCEFLOW_OPERATOR_TOKEN: token,
    });
    expect(loud.code, loud.stderr).toBe(0);
    expect(loud.stderr).toContain('npm run -s');
  });

  it("reconcile and resolve an unknown charge; the audit log names the token's operator, source api", async () => {
    const key = await unknownCharge(stack.ledger, 'api-cli');
    const tokenFile = path.join(tmp, 'token');
    writeFileSync(tokenFile, `${token}\n`);
    const reconcile = await api(
      ['reconcile', 'acme', 'payment.charge', key, '--reason', 'checking', '--json'],
      {
        ONCEFLOW_OPERATOR_TOKEN: undefined,
      },
    );
    // No token in the environment and no --token-file: refused before any request.
    expect(reconcile.code).toBe(1);
    expect(JSON.parse(reconcile.stderr)).toMatchObject({
      error: { message: expect.stringContaining('ONCEFLOW_OPERATOR_TOKEN') },
    });

    const withFile = await onceflow(
      [
        'ops',
        'reconcile',
        'acme',
        'payment.charge',
        key,
        '--reason',
        'checking',
        '--json',
        '--api-url',
        apiUrl,
        '--token-file',
        tokenFile,
      ],
      { DATABASE_URL: undefined },
    );
    expect(withFile.code, withFile.stderr).toBe(0);
    expect(JSON.parse(withFile.stdout)).toMatchObject({
      before: 'unknown',
      after: 'unknown',
      changed: false,
    });

    const resolve = await api([
      'resolve',
      'acme',
      'payment.charge',
      key,
      '--outcome',
      'failed',
      '--reason',
      'bank says no charge',
      '--json',
    ]);
    expect(resolve.code, resolve.stderr).toBe(0);
    expect(JSON.parse(resolve.stdout)).toMatchObject({ before: 'unknown', after: 'failed' });

    const { rows } = await stack.pool.query<{ actor: string; source: string; action: string }>(
      `select actor, source, action from audit_log where operation_key = $1 order by id`,
      [key],
    );
    expect(rows).toEqual([
      { actor: operatorName, source: 'api', action: 'reconcile' },
      { actor: operatorName, source: 'api', action: 'resolve' },
    ]);

    // Resolving twice is refused by the API, and the CLI exits 1 with its reason.
    const twice = await api([
      'resolve',
      'acme',
      'payment.charge',
      key,
      '--outcome',
      'failed',
      '--reason',
      'again',
      '--json',
    ]);
    expect(twice.code).toBe(1);
    expect(JSON.parse(twice.stderr)).toMatchObject({ error: { code: 'invalid_state' } });
  });

  it('redrive of an order that is not parked is refused (exit 1); a wrong token is refused too', async () => {
    const { input } = await stack.insertOrder();
    const redrive = await api(['redrive', 'acme', input.orderId, '--reason', 'try', '--json']);
    expect(redrive.code).toBe(1);
    expect(redrive.stdout).toBe('');
    expect(JSON.parse(redrive.stderr)).toMatchObject({
      error: { code: expect.stringMatching(/invalid_state|not_found/) },
    });

    const wrong = await api(['attention', '--json'], { ONCEFLOW_OPERATOR_TOKEN: generateOperatorToken() });
    expect(wrong.code).toBe(1);
    expect(JSON.parse(wrong.stderr)).toMatchObject({ error: { message: expect.stringContaining('401') } });
  });
});
