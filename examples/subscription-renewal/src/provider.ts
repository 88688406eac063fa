/**
 * A tiny payment provider on loopback, standing in for a real one: it charges
 * once per idempotency key, and looks charges up by key (the reconcile path).
 * `dropFirstResponse`: the first charge is made and its response is lost (the
 * connection is destroyed), as when a network drops a reply.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A type, not an interface: a step's stored result must be plain JSON. */
export type Charge = {
  id: string;
  idempotencyKey: string;
  amount: number;
  currency: string;
};

export interface Provider {
  url: string;
  /** Every charge made, one per key: the effects. */
  charges(): readonly Charge[];
  /** How many charge requests arrived, retries under one key included. */
  chargeRequests(): number;
  close(): Promise<void>;
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

export async function startProvider(options: { dropFirstResponse?: boolean } = {}): Promise<Provider> {
  const byKey = new Map<string, Charge>();
  let dropNext = options.dropFirstResponse ?? false;
  let requests = 0;

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://provider');
    if (req.method === 'GET' && url.pathname === '/charges') {
      const charge = byKey.get(url.searchParams.get('idempotency_key') ?? '');
      return charge ? send(res, 200, charge) : send(res, 404, { error: 'not_found' });
    }
    if (req.method === 'POST' && url.pathname === '/charges') {
      requests += 1;
      const key = req.headers['idempotency-key'];
      if (typeof key !== 'string' || key === '') return send(res, 400, { error: 'idempotency_key_required' });
      readJson(req).then(
        (body) => {
          const { amount, currency } = body as { amount: number; currency: string };
          let charge = byKey.get(key);
          if (!charge) {
            charge = { id: `ch_${byKey.size + 1}`, idempotencyKey: key, amount, currency };
            byKey.set(key, charge);
          }
          if (dropNext) {
            // The charge is made; its answer never reaches the caller.
            dropNext = false;
            req.socket.destroy();
            return;
          }
          send(res, 200, charge);
        },
        () => send(res, 400, { error: 'invalid_json' }),
      );
      return;
    }
    send(res, 404, { error: 'no_route' });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    charges: () => [...byKey.values()],
    chargeRequests: () => requests,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}
