/**
 * Named operators and the admin credential, on the real API server (over
 * real HTTP, from distinct loopback addresses) and the real CLI:
 * `operator add` prints a token once and stores its hash; the admin API
 * records that operator's name as the audit actor whatever the body claims;
 * a revoked token gets 401; failed admin credentials are throttled per
 * address, before any token is compared.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { loadConfig } from '../../src/config.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { temporalAddress, testDatabaseUrl, uniq } from '../support/env.ts';
import { json, runOps, unknownCharge } from './support.ts';

const ADMIN = randomBytes(32).toString('hex');
const FAILURE_MAX = 10;
let stack: OrderStack;
let app: FastifyInstance;
let port: number;

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
  const config = loadConfig({
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: stack.taskQueue,
    ONCEFLOW_ADMIN_TOKEN: ADMIN,
    OUTBOX_RELAY: 'off',
    SANDBOX_URL: stack.sandbox.url,
    PROVIDER_TIMEOUT_MS: '1500',
    API_ADMIN_AUTH_FAILURE_MAX: String(FAILURE_MAX),
    LOG_LEVEL: 'warn',
  });
  app = await buildApiServer({ pool: stack.pool, ledger: stack.ledger, temporal: stack.client, config });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});
afterAll(async () => {
  await app?.close();
  await stack?.close();
});

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request on its own connection from `from` (any 127.0.0.0/8 address is this machine). */
function call(
  method: string,
  path: string,
  opts: { token?: string; body?: unknown; from?: string } = {},
): Promise<Reply> {
  const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        localAddress: opts.from ?? '127.0.0.1',
        agent: false,
        headers: {
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
          ...(payload ? { 'content-type': 'application/json' } : {}),
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const sandbox = () => ({ sandboxUrl: stack.sandbox.url });

async function addOperator(name: string): Promise<string> {
  const added = json<{ name: string; token: string }>(
    await runOps(['operator', 'add', name, '--json'], sandbox()),
  );
  expect(added.name).toBe(name);
  return added.token;
}

async function auditRows(key: string) {
  const { rows } = await stack.pool.query<{
    action: string;
    actor: string;
    source: string;
    actor_credential: string;
  }>('select action, actor, source, actor_credential from audit_log where operation_key = $1 order by id', [
    key,
  ]);
  return rows;
}

describe('named operators', () => {
  it('operator add prints a fresh 256-bit token once and stores only its hash; list never shows tokens', async () => {
    const name = uniq('alice').replace(/[^A-Za-z0-9._@-]/g, '-');
    const token = await addOperator(name);
    expect(token).toMatch(/^opk_[A-Za-z0-9_-]{43}$/);
    const { rows } = await stack.pool.query<Record<string, unknown>>(
      'select * from operators where name = $1',
      [name],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.token_hash).toBe(createHash('sha256').update(token).digest('hex'));
    expect(JSON.stringify(rows[0])).not.toContain(token.slice(4));

    const again = await runOps(['operator', 'add', name], sandbox());
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already exists/);
    expect(again.stdout).not.toMatch(/opk_/);

    const list = await runOps(['operator', 'list', '--json'], sandbox());
    expect(json<{ name: string; state: string }[]>(list)).toContainEqual(
      expect.objectContaining({ name, state: 'active' }),
    );
    expect(list.stdout).not.toMatch(/opk_/);
    expect((await runOps(['operator', 'list'], sandbox())).stdout).toMatch(new RegExp(`${name}\\s+active`));
  });

  it("the admin API records the operator's name as the actor, whatever the body claims", async () => {
    const name = uniq('bob').replace(/[^A-Za-z0-9._@-]/g, '-');
    const token = await addOperator(name);
    const key = await unknownCharge(stack.ledger, 'operator-charge');
    const rec = await call('POST', '/admin/operations/reconcile', {
      token,
      body: { tenant: 'acme', type: 'payment.charge', key, actor: 'mallory' },
    });
    expect(rec.status, rec.body).toBe(200);
    const res = await call('POST', '/admin/operations/resolve', {
      token,
      body: {
        tenant: 'acme',
        type: 'payment.charge',
        key,
        outcome: 'failed',
        actor: 'mallory',
        reason: 'provider support: no charge',
      },
    });
    expect(res.status, res.body).toBe(200);
    expect(await auditRows(key)).toEqual([
      { action: 'reconcile', actor: name, source: 'api', actor_credential: 'operator_token' },
      { action: 'resolve', actor: name, source: 'api', actor_credential: 'operator_token' },
    ]);
    // The audit route shows how each actor was established.
    const audit = await call('GET', `/admin/audit?key=${encodeURIComponent(key)}`, { token });
    expect(JSON.parse(audit.body).data[0]).toMatchObject({ actor: name, actorCredential: 'operator_token' });
  });

  it("the shared admin token records the fixed actor 'admin-token', never a claimed one", async () => {
    const key = await unknownCharge(stack.ledger, 'operator-charge');
    const rec = await call('POST', '/admin/operations/reconcile', {
      token: ADMIN,
      body: { tenant: 'acme', type: 'payment.charge', key, actor: 'carol' },
    });
    expect(rec.status, rec.body).toBe(200);
    // Without an actor in the body too: it is no longer required.
    const again = await call('POST', '/admin/operations/reconcile', {
      token: ADMIN,
      body: { tenant: 'acme', type: 'payment.charge', key },
    });
    expect(again.status, again.body).toBe(200);
    expect(await auditRows(key)).toEqual([
      { action: 'reconcile', actor: 'admin-token', source: 'api', actor_credential: 'admin_token' },
      { action: 'reconcile', actor: 'admin-token', source: 'api', actor_credential: 'admin_token' },
    ]);
  });

  it('the CLI records its --actor as self-declared', async () => {
    const key = await unknownCharge(stack.ledger, 'operator-charge');
    const r = await runOps(
      ['reconcile', 'acme', 'payment.charge', key, '--actor', 'dave', '--json'],
      sandbox(),
    );
    expect(r.code, r.stderr).toBe(0);
    expect(await auditRows(key)).toEqual([
      { action: 'reconcile', actor: 'dave', source: 'cli', actor_credential: 'self_declared' },
    ]);
    const shown = await runOps(['audit', '--key', key], sandbox());
    expect(shown.stdout).toMatch(/dave \(cli, self-declared\)/);
  });

  it('a revoked token gets 401 from the next request on', async () => {
    const name = uniq('erin').replace(/[^A-Za-z0-9._@-]/g, '-');
    const token = await addOperator(name);
    expect((await call('GET', '/admin/attention', { token, from: '127.0.0.4' })).status).toBe(200);
    const revoked = json<{ revoked: boolean }>(
      await runOps(['operator', 'revoke', name, '--json'], sandbox()),
    );
    expect(revoked.revoked).toBe(true);
    const res = await call('GET', '/admin/attention', { token, from: '127.0.0.4' });
    expect(res.status).toBe(401);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(JSON.parse(res.body)).toMatchObject({ type: 'https://onceflow.dev/problems/admin-unauthorized' });
    const list = json<{ name: string; state: string }[]>(
      await runOps(['operator', 'list', '--json'], sandbox()),
    );
    expect(list).toContainEqual(expect.objectContaining({ name, state: 'revoked' }));
    expect((await runOps(['operator', 'revoke', 'nobody-here'], sandbox())).code).toBe(1);
  });
});

describe('failed admin credentials are throttled per address', () => {
  it('400 wrong tokens from one address: 401 up to the limit, then 429 with Retry-After; other addresses unaffected', async () => {
    const guesser = '127.0.0.2';
    const statuses: number[] = [];
    let retryAfter: string | undefined;
    // Guesses of both kinds: shared-token guesses, and well-formed operator tokens that match no hash.
    for (let i = 0; i < 400; i += 20) {
      const batch = await Promise.all(
        Array.from({ length: 20 }, (_, j) =>
          call('GET', '/admin/audit', {
            from: guesser,
            token:
              (i + j) % 2 ? `opk_${randomBytes(32).toString('base64url')}` : randomBytes(32).toString('hex'),
          }),
        ),
      );
      for (const r of batch) {
        statuses.push(r.status);
        if (r.status === 429) retryAfter = r.headers['retry-after'] as string;
      }
    }
    expect(statuses.filter((s) => s === 401)).toHaveLength(FAILURE_MAX);
    expect(statuses.filter((s) => s === 429)).toHaveLength(400 - FAILURE_MAX);
    expect(Number(retryAfter)).toBeGreaterThan(0);

    // While throttled, even a valid credential from that address is not looked at.
    const operatorToken = await addOperator(uniq('frank').replace(/[^A-Za-z0-9._@-]/g, '-'));
    expect((await call('GET', '/admin/attention', { from: guesser, token: operatorToken })).status).toBe(429);
    expect((await call('GET', '/admin/attention', { from: guesser, token: ADMIN })).status).toBe(429);
    // Another address, with a valid token of either kind, still works.
    expect((await call('GET', '/admin/attention', { from: '127.0.0.3', token: operatorToken })).status).toBe(
      200,
    );
    expect((await call('GET', '/admin/attention', { from: '127.0.0.3', token: ADMIN })).status).toBe(200);
  });
});
