/** A real sandbox on a free port, with its own account, plus a real webhook receiver. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { freePort } from '../../src/process/ports.ts';
import type { Pool } from '../../src/db/index.ts';
import { startSandbox, type RunningSandbox } from '../../dev/sandbox/server.ts';
import type { SandboxDeps } from '../../dev/sandbox/app.ts';
import { testPool, uniq } from '../support/env.ts';

export const SECRET = 'whsec_test_secret';

export interface TestSandbox extends RunningSandbox {
  pool: Pool;
  account: string;
  call(
    method: string,
    path: string,
    init?: { body?: unknown; key?: string; headers?: Record<string, string> },
  ): Promise<Reply>;
  stop(): Promise<void>;
}

/** Parsed JSON in assertions: tests read arbitrary response shapes. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

interface Reply {
  status: number;
  headers: Headers;
  body: Json;
  text: string;
}

export async function startTestSandbox(
  opts: Partial<Omit<SandboxDeps, 'pool' | 'webhook'>> & { webhookUrl?: string; dispatch?: boolean } = {},
): Promise<TestSandbox> {
  const pool = testPool(20);
  const account = opts.account ?? uniq('acct');
  const { webhookUrl, ...rest } = opts;
  const sandbox = await startSandbox({
    ...rest,
    pool,
    account,
    port: await freePort(),
    webhook: { url: webhookUrl, secret: SECRET },
  });
  return {
    ...sandbox,
    pool,
    account,
    call: (method, path, init = {}) => call(sandbox.url, method, path, init),
    async stop() {
      await sandbox.close();
      await pool.end();
    },
  };
}

async function call(
  baseUrl: string,
  method: string,
  path: string,
  init: { body?: unknown; key?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  if (init.key !== undefined) headers['idempotency-key'] = init.key;
  const res = await fetch(new URL(path, baseUrl), {
    method,
    headers,
    body:
      init.body === undefined ? null : typeof init.body === 'string' ? init.body : JSON.stringify(init.body),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, body, text };
}

export function chargeBody(overrides: Record<string, unknown> = {}) {
  return {
    amount: 1999,
    currency: 'usd',
    payment_method: 'pm_card_visa',
    metadata: { order_id: uniq('ord'), tenant_id: 'tenant-a' },
    ...overrides,
  };
}

interface Received {
  headers: http.IncomingHttpHeaders;
  rawBody: string;
  body: { id: string; type: string; created: number; data: { object: Record<string, unknown> } };
}

/** A webhook receiver. `respond(n)` picks the status for the n-th request (0-based). */
export async function startReceiver(respond: (n: number) => number = () => 200) {
  const received: Received[] = [];
  let waiters: { n: number; resolve: () => void }[] = [];
  let count = 0;
  let responder = respond;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      const status = responder(count++);
      if (status >= 200 && status < 300) {
        received.push({ headers: req.headers, rawBody, body: JSON.parse(rawBody) as Received['body'] });
      }
      res.writeHead(status).end();
      waiters = waiters.filter((w) => {
        if (count >= w.n) w.resolve();
        return count < w.n;
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    /** Total requests seen, accepted or not. */
    get count() {
      return count;
    },
    setResponder(fn: (n: number) => number) {
      responder = fn;
    },
    reset() {
      received.length = 0;
      count = 0;
      responder = respond;
    },
    /** Resolves once `n` requests in total have arrived. */
    waitForRequests(n: number): Promise<void> {
      if (count >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
