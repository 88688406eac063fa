/**
 * Tagged API keys (issue #24 item 3): a key's tag is checked before any
 * lookup, so a forged key costs no database work and counts toward nothing,
 * and a well-tagged key is never refused for its neighbours' guesses. Keys
 * without a tag (minted before tags, the demo keys) still work through the
 * lookup, and only they are counted by the failed-key throttle.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashApiKey, mintApiKey } from '../../src/api/auth.ts';
import { insertApiKey, insertTenant } from '../../src/tenants/sql.ts';
import { testDatabaseUrl, testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { PROBLEM, newTenant, startApi, type TestApi } from './support.ts';
import { entryArgv } from '../support/processes.ts';

const SECRET = randomBytes(32).toString('hex');
const OTHER_SECRET = randomBytes(32).toString('hex');
const root = path.resolve(import.meta.dirname, '../..');

/** GET from a chosen loopback source address, so each test is its own "client address". */
function getFrom(
  api: TestApi,
  key: string,
  localAddress: string,
): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  const { port } = new URL(api.url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: Number(port),
        path: '/v1/orders?limit=1',
        localAddress,
        agent: false,
        headers: key ? { authorization: `Bearer ${key}` } : {},
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

async function tenantWithKey(api: TestApi, key: string): Promise<string> {
  const tenantId = uniq('tag').toLowerCase();
  await insertTenant(api.pool, { id: tenantId, name: tenantId });
  await insertApiKey(api.pool, { keyHash: hashApiKey(key), tenantId, label: 'test' });
  return tenantId;
}

/** A guess shaped like a tagged key: right length and alphabet, random tag. */
const forgedKey = () =>
  `sk_test_${randomBytes(24).toString('base64url')}_${randomBytes(16).toString('base64url')}`;
const untaggedGuess = () => `sk_test_${randomBytes(24).toString('base64url')}`;

describe('tagged API keys (cache off, so every request decides afresh)', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({
      env: { API_KEY_SECRET: SECRET, API_KEY_CACHE_TTL_MS: '0', API_AUTH_FAILURE_MAX: '20' },
    });
  });
  afterAll(async () => api?.close());

  it("100 bad keys from one address don't lock out a valid tagged key from the same address", async () => {
    const key = mintApiKey(SECRET);
    await tenantWithKey(api, key);
    const address = '127.0.0.21';
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      statuses.push((await getFrom(api, i % 2 ? forgedKey() : untaggedGuess(), address)).status);
    }
    expect(statuses.every((s) => s === 401 || s === 429)).toBe(true);
    // Not cached (TTL 0): each of these is decided after the burst.
    for (let i = 0; i < 3; i++) {
      const ok = await getFrom(api, key, address);
      expect(ok.status, ok.body).toBe(200);
    }
  });

  it('a forged tag gets 401 without a database lookup', async () => {
    // An exclusive lock on api_keys holds any lookup; the forged key must be answered while it is held.
    const locker = testPool(1);
    const conn = await locker.connect();
    const lookupWaiting = async () => {
      const { rows } = await api.pool.query<{ n: number }>(
        `select count(*)::int as n from pg_locks where relation = 'api_keys'::regclass and not granted`,
      );
      return rows[0]!.n > 0;
    };
    try {
      await conn.query('begin');
      await conn.query('lock table api_keys in access exclusive mode');
      const address = '127.0.0.22';
      for (const key of [forgedKey(), mintApiKey(OTHER_SECRET)]) {
        const winner = await Promise.race([
          getFrom(api, key, address).then((r) => ({ answered: r })),
          until('a lookup waiting on api_keys', lookupWaiting).then(() => ({ answered: null })),
        ]);
        expect(winner.answered, 'the forged key waited for a lookup').not.toBeNull();
        expect(winner.answered!.status).toBe(401);
        expect(JSON.parse(winner.answered!.body)).toMatchObject({ type: `${PROBLEM}unauthorized` });
      }
      // The probe sees a lookup when there is one: an untagged key does look up, and waits.
      const untagged = getFrom(api, untaggedGuess(), address);
      await until('the untagged key waiting on api_keys', lookupWaiting);
      await conn.query('rollback');
      expect((await untagged).status).toBe(401);
    } finally {
      await conn.query('rollback').catch(() => undefined);
      conn.release();
      await locker.end();
    }
  });

  it('a well-tagged key that is unknown or revoked gets 401 after the lookup', async () => {
    const unknown = mintApiKey(SECRET);
    expect((await getFrom(api, unknown, '127.0.0.23')).status).toBe(401);
    const revoked = mintApiKey(SECRET);
    await tenantWithKey(api, revoked);
    expect((await getFrom(api, revoked, '127.0.0.23')).status).toBe(200);
    await api.pool.query(`update api_keys set revoked_at = now() where key_hash = $1`, [hashApiKey(revoked)]);
    expect((await getFrom(api, revoked, '127.0.0.23')).status).toBe(401);
  });

  it('a key without a tag (minted before tags) still works', async () => {
    const legacy = await newTenant(api.pool, 'legacy');
    expect(legacy.key).not.toMatch(/^sk_test_[\w-]{32}_[\w-]{22}$/);
    expect((await getFrom(api, legacy.key, '127.0.0.24')).status).toBe(200);
    expect((await getFrom(api, 'sk_test_acme_local', '127.0.0.24')).status).toBe(200);
  });

  it('untagged guesses are still throttled per address, for untagged keys only', async () => {
    const legacy = await newTenant(api.pool, 'legacy-thr');
    const tagged = mintApiKey(SECRET);
    await tenantWithKey(api, tagged);
    const address = '127.0.0.25';
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) statuses.push((await getFrom(api, untaggedGuess(), address)).status);
    expect(statuses.slice(0, 20)).toEqual(Array(20).fill(401));
    expect(new Set(statuses.slice(20))).toEqual(new Set([429]));
    // The untagged key behind that address waits out the window (rotate to a tagged key to avoid it)...
    expect((await getFrom(api, legacy.key, address)).status).toBe(429);
    // ...the tagged one does not, and neither do forged or missing keys count or get 429.
    expect((await getFrom(api, tagged, address)).status).toBe(200);
    expect((await getFrom(api, forgedKey(), address)).status).toBe(401);
    expect((await getFrom(api, '', address)).status).toBe(401);
  });
});

describe('requests without a valid key are rate-limited per client address', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({
      env: { API_KEY_SECRET: SECRET, API_KEY_CACHE_TTL_MS: '0', API_RATE_LIMIT_MAX: '30' },
    });
  });
  afterAll(async () => api?.close());

  it('a flood without credentials gets 429 with Retry-After; valid keys from that address keep working', async () => {
    const tagged = mintApiKey(SECRET);
    await tenantWithKey(api, tagged);
    const legacy = await newTenant(api.pool, 'flood');
    const address = '127.0.0.31';
    const statuses: number[] = [];
    let last: Awaited<ReturnType<typeof getFrom>> | undefined;
    for (let i = 0; i < 40; i++) {
      last = await getFrom(api, i % 3 === 0 ? '' : i % 3 === 1 ? forgedKey() : mintApiKey(SECRET), address);
      statuses.push(last.status);
    }
    expect(statuses.slice(0, 30)).toEqual(Array(30).fill(401));
    expect(new Set(statuses.slice(30))).toEqual(new Set([429]));
    expect(JSON.parse(last!.body)).toMatchObject({ type: `${PROBLEM}rate-limited` });
    expect(Number(last!.headers['retry-after'])).toBeGreaterThan(0);
    // The valid keys are limited per tenant, not per address.
    expect((await getFrom(api, tagged, address)).status).toBe(200);
    expect((await getFrom(api, legacy.key, address)).status).toBe(200);
    // Another address is not affected.
    expect((await getFrom(api, '', '127.0.0.32')).status).toBe(401);
  });
});

describe('API_KEY_ALLOW_UNTAGGED=off, and keys minted under another secret', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({
      env: { API_KEY_SECRET: OTHER_SECRET, API_KEY_ALLOW_UNTAGGED: 'off', API_KEY_CACHE_TTL_MS: '0' },
    });
  });
  afterAll(async () => api?.close());

  it('refuses untagged keys, accepts keys tagged under its secret, refuses those of another', async () => {
    const legacy = await newTenant(api.pool, 'untagged-off');
    const res = await getFrom(api, legacy.key, '127.0.0.26');
    expect(res.status).toBe(401);
    expect(JSON.parse(res.body)).toMatchObject({ type: `${PROBLEM}unauthorized` });
    const ours = mintApiKey(OTHER_SECRET);
    await tenantWithKey(api, ours);
    expect((await getFrom(api, ours, '127.0.0.26')).status).toBe(200);
    const theirs = mintApiKey(SECRET);
    await tenantWithKey(api, theirs);
    expect((await getFrom(api, theirs, '127.0.0.26')).status).toBe(401);
  });
});

describe('npm run api-key', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ env: { API_KEY_SECRET: SECRET, API_KEY_CACHE_TTL_MS: '0' } });
  });
  afterAll(async () => api?.close());

  function apiKeyScript(args: string[], env: Record<string, string>) {
    return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [...entryArgv('src/cli/api-key.ts'), ...args],
        { cwd: root, env: { PATH: process.env.PATH ?? '', ...env } },
        (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
      );
    });
  }

  it('mints a tagged key under API_KEY_SECRET that the API accepts', async () => {
    const tenant = uniq('cli-tag').toLowerCase();
    const r = await apiKeyScript([tenant, '--create-tenant', '--json'], {
      DATABASE_URL: testDatabaseUrl(),
      API_KEY_SECRET: SECRET,
    });
    expect(r.code, r.stderr).toBe(0);
    const { key } = JSON.parse(r.stdout) as { key: string };
    expect(key).toMatch(/^sk_test_[\w-]{32}_[\w-]{22}$/);
    // Behind a guessing neighbour, too: the key is recognised by its tag.
    for (let i = 0; i < 25; i++) await getFrom(api, untaggedGuess(), '127.0.0.27');
    expect((await getFrom(api, key, '127.0.0.27')).status).toBe(200);
  });
});
