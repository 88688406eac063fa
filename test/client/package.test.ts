/**
 * The client package (packages/client, `@onceflow/client`) as its users get it:
 * `npm pack` it, install the tarball into an empty project, and look at what
 * arrived. openapi-fetch, standardwebhooks (the webhook verifier) and nothing
 * of the app or the core (no server, no Temporal, no Postgres), the build
 * working in plain Node from dist/, and declarations a TypeScript user can
 * compile against.
 *
 * Needs the npm registry for openapi-fetch and standardwebhooks
 * (--prefer-offline uses the local cache first). `npm pack` runs `prepack`, which rebuilds the package's dist/;
 * nothing else in the suite reads that folder.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const packageDir = path.resolve(import.meta.dirname, '../../packages/client');

/** What the entry point exports at run time (types aside). */
const PUBLIC_NAMES = [
  'DEFAULT_RETRY',
  'NetworkError',
  'ProblemError',
  'TERMINAL_ORDER_STATUSES',
  'WEBHOOK_EVENT_TYPES',
  'WaitTimeoutError',
  'Webhook',
  'WebhookVerificationError',
  'backoffDelayMs',
  'createOnceflowClient',
  'isRetryableStatus',
  'parseRetryAfter',
  'verifyWebhook',
];

/** The app's and the core's dependencies: none may reach a user of the client. */
const SERVER_ONLY = [
  'fastify',
  'stripe',
  'nodemailer',
  'pino',
  'prom-client',
  'tsx',
  'undici',
  'commander',
  'pg',
  'onceflow',
];
const SERVER_ONLY_PATTERNS = [/^@opentelemetry\/sdk-/, /^@temporalio\//, /^@fastify\//];

/** The npm commands' environment without an outer `npm test`'s npm_* variables (they would point here). */
function npmEnv(): NodeJS.ProcessEnv {
  const keep = new Set(['npm_config_cache', 'npm_config_userconfig', 'npm_config_registry']);
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_') || keep.has(k)),
  );
}

/** Runs a command to completion within `timeoutMs`; fails with its output if it fails. */
function run(cmd: string, args: string[], cwd: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      { cwd, env: npmEnv(), timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) {
          const why = err.killed ? `timed out after ${timeoutMs} ms` : `failed (${String(err.code)})`;
          reject(new Error(`${cmd} ${args.join(' ')} in ${cwd} ${why}:\n${stderr}\n${stdout}`.trim()));
          return;
        }
        resolve(stdout);
      },
    );
  });
}

let tmp: string;
let tarball: string;
let project: string;

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-client-pack-'));
  // stdout is the pack report; prepack's build output goes to stderr.
  const packed = JSON.parse(
    await run('npm', ['pack', '--json', '--pack-destination', tmp], packageDir, 300_000),
  ) as [{ filename: string }];
  tarball = path.join(tmp, packed[0].filename);

  project = path.join(tmp, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(
    path.join(project, 'package.json'),
    JSON.stringify({ name: 'client-user', version: '1.0.0', private: true, type: 'module' }),
  );
  await run(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball],
    project,
    300_000,
  );
}, 660_000);

afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('holds the build (JavaScript, declarations, the generated schema types) and the OpenAPI document, no sources', async () => {
    const files = (await run('tar', ['-tzf', tarball], tmp, 60_000))
      .split('\n')
      .filter(Boolean)
      .map((f) => f.replace(/^package\//, ''));
    for (const name of ['index', 'errors', 'retry', 'webhooks']) {
      expect(files).toContain(`dist/${name}.js`);
      expect(files).toContain(`dist/${name}.d.ts`);
    }
    expect(files).toContain('dist/schema.d.ts');
    for (const f of ['openapi.json', 'package.json', 'README.md', 'LICENSE']) expect(files).toContain(f);
    expect(files.filter((f) => /^(src|test)\//.test(f) || /\.test\.|vitest|tsconfig/.test(f))).toEqual([]);
  });
});

describe('installed into an empty project', () => {
  it('brings openapi-fetch, standardwebhooks and none of the server dependencies (npm ls --all --omit=dev)', async () => {
    const installed = (await run('npm', ['ls', '--all', '--omit=dev', '--parseable'], project, 120_000))
      .split('\n')
      .filter((p) => p.includes(`${path.sep}node_modules${path.sep}`))
      .map((p) => p.slice(p.lastIndexOf(`node_modules${path.sep}`) + 'node_modules/'.length));
    expect(installed).toContain('@onceflow/client');
    expect(installed).toContain('openapi-fetch');
    expect(installed).toContain('standardwebhooks');
    const serverOnly = installed.filter(
      (name) => SERVER_ONLY.includes(name) || SERVER_ONLY_PATTERNS.some((re) => re.test(name)),
    );
    expect(serverOnly).toEqual([]);

    const manifest = JSON.parse(
      fs.readFileSync(path.join(project, 'node_modules/@onceflow/client/package.json'), 'utf8'),
    ) as { dependencies?: Record<string, string>; peerDependencies?: Record<string, string> };
    expect(Object.keys(manifest.dependencies ?? {}).sort()).toEqual(['openapi-fetch', 'standardwebhooks']);
    expect(manifest.peerDependencies).toBeUndefined();
  });

  it('imports in plain Node from dist/: a client, one retried request under one key, the OpenAPI document', async () => {
    const script = path.join(project, 'smoke.mjs');
    fs.writeFileSync(
      script,
      `
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as client from '@onceflow/client';

// No server: the client's fetch seam answers 503 once, then the 202 replay.
const seen = [];
const answers = [
  new Response(JSON.stringify({ type: 'about:blank', title: 'Unavailable', status: 503 }), {
    status: 503,
    headers: { 'content-type': 'application/problem+json' },
  }),
  new Response(JSON.stringify({ id: 'ord_1', status: 'accepted' }), {
    status: 202,
    headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' },
  }),
];
const api = client.createOnceflowClient({
  baseUrl: 'http://orders.invalid/',
  apiKey: 'sk_test_x',
  sleep: async () => {},
  fetch: async (request) => {
    seen.push({
      method: request.method,
      url: request.url,
      key: request.headers.get('idempotency-key'),
      auth: request.headers.get('authorization'),
    });
    return answers.shift();
  },
});
const body = {
  customer: { id: 'cus_1', email: 'a@example.com' },
  currency: 'usd',
  items: [{ sku: 'SKU-1', quantity: 1, unitAmount: 1000 }],
  paymentMethod: 'pm_card_visa',
};
const result = await api.createOrder(body);
const doc = JSON.parse(fs.readFileSync(fileURLToPath(import.meta.resolve('@onceflow/client/openapi.json')), 'utf8'));

// A webhook delivery signed the Standard Webhooks way, verified with the re-exported library (CommonJS, from ESM).
const secret = 'whsec_' + Buffer.from('0123456789abcdef0123456789abcdef').toString('base64');
const event = { id: 'evt_1', type: 'order.completed', createdAt: new Date().toISOString(), data: { object: { id: 'ord_1' }, version: 3 } };
const payload = JSON.stringify(event);
const now = new Date();
const hookHeaders = {
  'webhook-id': 'evt_1',
  'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
  'webhook-signature': new client.Webhook(secret).sign('evt_1', now, payload),
};
const verified = client.verifyWebhook(secret, payload, hookHeaders);
let refused = null;
try {
  client.verifyWebhook(secret, payload.replace('"version":3', '"version":4'), hookHeaders);
} catch (err) {
  refused = err instanceof client.WebhookVerificationError ? err.message : String(err);
}
console.log(JSON.stringify({
  names: Object.keys(client).sort(),
  resolved: import.meta.resolve('@onceflow/client'),
  retryAfter: client.parseRetryAfter('3'),
  problem: new client.ProblemError({ type: 'about:blank', title: 'Nope', status: 422 }).message,
  result,
  seen,
  hasOrdersPath: '/v1/orders' in doc.paths,
  verified,
  refused,
}));
`,
    );
    const out = JSON.parse(await run(process.execPath, [script], project, 60_000)) as {
      names: string[];
      resolved: string;
      retryAfter: number;
      problem: string;
      result: { idempotencyKey: string };
      seen: { key: string }[];
      hasOrdersPath: boolean;
      verified: unknown;
      refused: string | null;
    };
    expect(out.names).toEqual(PUBLIC_NAMES);
    expect(out.resolved).toMatch(/\/node_modules\/@onceflow\/client\/dist\/index\.js$/);
    expect(out.retryAfter).toBe(3000);
    expect(out.problem).toBe('422 Nope');
    const key = out.result.idempotencyKey;
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(out).toMatchObject({
      result: { order: { id: 'ord_1' }, replayed: true, attempts: 2 },
      seen: [
        { method: 'POST', url: 'http://orders.invalid/v1/orders', key, auth: 'Bearer sk_test_x' },
        { method: 'POST', url: 'http://orders.invalid/v1/orders', key, auth: 'Bearer sk_test_x' },
      ],
      hasOrdersPath: true,
      verified: { id: 'evt_1', type: 'order.completed', data: { version: 3 } },
      refused: 'No matching signature found',
    });
  });

  it('its declarations type-check for a TypeScript user (the generated types included, not any)', async () => {
    fs.writeFileSync(
      path.join(project, 'user.ts'),
      `
import {
  createOnceflowClient,
  ProblemError,
  TERMINAL_ORDER_STATUSES,
  type CreateOrderBody,
  type OrderStatus,
  type paths,
  verifyWebhook,
  WebhookVerificationError,
  type WebhookEvent,
} from '@onceflow/client';

export const client = createOnceflowClient({ baseUrl: 'http://127.0.0.1:3000', apiKey: 'sk_test_acme_local' });
export const body: CreateOrderBody = {
  customer: { id: 'cus_42', email: 'ada@example.com' },
  currency: 'eur',
  items: [{ sku: 'BOOK-1', quantity: 1, unitAmount: 1999 }],
  paymentMethod: 'pm_card_visa',
};
// @ts-expect-error: an order needs items (were schema.d.ts lost, CreateOrderBody would be any)
export const noItems: CreateOrderBody = { customer: body.customer, currency: 'eur', paymentMethod: 'pm' };
// @ts-expect-error: a client needs an API key
export const noKey = createOnceflowClient({ baseUrl: 'http://127.0.0.1:3000' });
// @ts-expect-error: not a status
export const notAStatus: OrderStatus = 'shipped';
export const terminal: readonly OrderStatus[] = TERMINAL_ORDER_STATUSES;
export type CreateOrderPath = paths['/v1/orders']['post'];
// A delivery's event, narrowed on its type: an order event carries an order, a refund event a refund.
export function onEvent(secret: string, body: string, headers: Record<string, string>): string {
  let event: WebhookEvent;
  try {
    event = verifyWebhook(secret, body, headers);
  } catch (err) {
    if (err instanceof WebhookVerificationError) return 'refused';
    throw err;
  }
  if (event.type === 'refund.succeeded') return event.data.object.orderId + event.data.version;
  if (event.type === 'order.completed') {
    // @ts-expect-error: an order has no orderId (were the event untyped, this would compile)
    return event.data.object.orderId;
  }
  // @ts-expect-error: not an event type
  if (event.type === 'order.shipped') return 'never';
  return event.data.object.status;
}
export async function place(): Promise<string> {
  try {
    const { order } = await client.createOrder(body);
    return (await client.waitForOrder(order.id)).status;
  } catch (err) {
    if (err instanceof ProblemError) return err.type;
    throw err;
  }
}
`,
    );
    fs.writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          // fetch's Request and Response, which the client's options name; this user has no @types/node.
          lib: ['ES2022', 'DOM'],
          strict: true,
          noEmit: true,
          types: [],
          skipLibCheck: true,
        },
        files: ['user.ts'],
      }),
    );
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    await run(process.execPath, [tsc, '-p', project], project, 120_000);
  });
});
