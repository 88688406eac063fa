/**
 * Issue #24 item 10: behind a proxy that API_TRUST_PROXY does not name, the
 * API sees the proxy's address as every client's, so the failed-key
 * throttle and the unauthenticated rate limit are shared by all of them. The
 * first request with X-Forwarded-For from an untrusted peer logs one warning
 * saying so; later ones don't repeat it.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { configureLogging } from '../../src/log.ts';
import { captureLines } from '../log/capture.ts';
import { call, newTenant, startApi, type TestApi } from './support.ts';

const out = captureLines();
const warnings = () =>
  out.lines().filter((l) => l.level === 'warn' && String(l.msg).includes('X-Forwarded-For'));

beforeAll(() => {
  configureLogging({ level: 'info', service: 'api', destination: out.stream });
});

describe('a peer named in API_TRUST_PROXY', () => {
  let api: TestApi;
  beforeAll(async () => {
    // A proxy in front counts as exposed: the published local key secret is refused, so set one.
    api = await startApi({
      env: { API_TRUST_PROXY: '127.0.0.1', API_KEY_SECRET: randomBytes(32).toString('hex') },
    });
  });
  afterAll(async () => api?.close());

  it('forwards without a warning', async () => {
    const t = await newTenant(api.pool, 'xff-trusted');
    const res = await call(api, 'GET', '/v1/orders?limit=1', {
      key: t.key,
      headers: { 'x-forwarded-for': '203.0.113.7' },
    });
    expect(res.status).toBe(200);
    expect(warnings()).toEqual([]);
  });
});

describe('a peer not in API_TRUST_PROXY', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(async () => api?.close());

  it('no warning without X-Forwarded-For', async () => {
    expect((await call(api, 'GET', '/healthz')).status).toBeLessThan(500);
    expect(warnings()).toEqual([]);
  });

  it('the first request with X-Forwarded-For logs one warning naming API_TRUST_PROXY; later ones add none', async () => {
    const t = await newTenant(api.pool, 'xff-untrusted');
    for (const xff of ['203.0.113.7', '198.51.100.9, 203.0.113.7', '203.0.113.8']) {
      const res = await call(api, 'GET', '/v1/orders?limit=1', {
        key: t.key,
        headers: { 'x-forwarded-for': xff },
      });
      expect(res.status).toBe(200);
    }
    await call(api, 'GET', '/v1/orders', {
      key: 'sk_test_nope',
      headers: { 'x-forwarded-for': '203.0.113.9' },
    });
    expect(warnings()).toEqual([
      expect.objectContaining({
        level: 'warn',
        peer: expect.stringMatching(/127\.0\.0\.1$/),
        msg: expect.stringContaining('API_TRUST_PROXY'),
      }),
    ]);
  });
});
