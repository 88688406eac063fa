/**
 * What the merchant-webhook tests share: a real receiver on loopback whose answer per request a
 * function decides, and the API as src/api/main.ts builds it (operator routes included) with its
 * outbox relay running, so transitions' delivery workflows start, and a signed-in operator.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { OutboxRelay } from '../../src/api/outbox.ts';
import { generateOperatorToken, hashOperatorToken, insertOperator } from '../../src/operator/accounts-sql.ts';
import { testConfig } from '../api/support.ts';
import { uniq } from './env.ts';
import type { OrderStack } from './stack.ts';

interface Received {
  id: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A receiver whose answer to the n-th request `answer` decides; it records every request. */
export async function startReceiver(
  answer: (n: number, req: http.IncomingMessage) => number | 'hang' | 'redirect',
  port = 0,
) {
  const received: Received[] = [];
  const hanging: http.ServerResponse[] = [];
  let redirectTo = '';
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      received.push({ id: String(req.headers['webhook-id']), headers: req.headers, body });
      const a = answer(received.length, req);
      if (a === 'hang') return void hanging.push(res);
      if (a === 'redirect') return void res.writeHead(302, { location: redirectTo }).end();
      res
        .writeHead(a, { 'content-type': 'text/plain' })
        .end(a < 300 ? 'ok' : 'receiver down for maintenance');
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received,
    redirectTo: (u: string) => (redirectTo = u),
    close: () =>
      new Promise<void>((resolve) => {
        for (const r of hanging) r.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

export interface AdminApi {
  url: string;
  app: FastifyInstance;
  operatorName: string;
  operatorToken: string;
  close(): Promise<void>;
}

/** The API with operator routes on the stack's pool, client and task queue, loopback receivers allowed. */
export async function startAdminApi(stack: OrderStack, env: Record<string, string> = {}): Promise<AdminApi> {
  const config = testConfig({
    SANDBOX_URL: stack.sandbox.url,
    TEMPORAL_TASK_QUEUE: stack.taskQueue,
    WEBHOOK_ALLOW_PRIVATE_URLS: 'true',
    ...env,
  });
  const relay = new OutboxRelay({ pool: stack.pool, temporal: stack.client, enabled: true, pollMs: 100 });
  const app = await buildApiServer({
    pool: stack.pool,
    ledger: stack.ledger,
    temporal: stack.client,
    config,
    relay,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  // The API process's relay loop: it starts delivery workflows, first ones and redeliveries.
  relay.start();
  const operatorName = uniq('hooks').toLowerCase();
  const operatorToken = generateOperatorToken();
  await insertOperator(stack.pool, { name: operatorName, tokenHash: hashOperatorToken(operatorToken) });
  return {
    url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    app,
    operatorName,
    operatorToken,
    async close() {
      await app.close();
      await relay.stop();
    },
  };
}
