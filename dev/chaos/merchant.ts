/**
 * The merchant of every chaos run: a real HTTP receiver in the harness's process, on loopback,
 * registered (POST /v1/webhook-endpoints) as an endpoint of each load tenant for the order events
 * before any load. It does what docs/API.md asks of a receiver: it verifies each delivery's
 * Standard Webhooks signature, and processes each event ID once (its own dedupe); a delivery of an
 * ID already processed is answered 2xx and only counted. Every delivery is recorded for the
 * verdict (invariants.ts, checkMerchantEvents). merchant-down closes it (the port refuses) and
 * opens it again on the same port.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import type { MerchantDelivery } from './invariants.ts';

const ORDER_EVENTS = ['order.completed', 'order.rejected', 'order.needs_attention'];

export class MerchantReceiver {
  /** Every delivery that passed the signature check, in arrival order. */
  readonly deliveries: MerchantDelivery[] = [];
  private readonly processed = new Set<string>();
  private readonly verifiers = new Map<string, Webhook>();
  private rejected: string[] = [];
  private server: http.Server | undefined;
  port = 0;

  get listening(): boolean {
    return this.server?.listening ?? false;
  }

  /** Listens on a free loopback port, then registers an endpoint for each tenant (its API must be up). */
  async start(apiUrl: string, tenants: readonly { id: string; key: string }[]): Promise<void> {
    await this.up();
    for (const t of tenants) {
      const res = await fetch(`${apiUrl}/v1/webhook-endpoints`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${t.key}`,
          'idempotency-key': randomUUID(),
          'content-type': 'application/json',
        },
        body: JSON.stringify({
          url: `http://127.0.0.1:${this.port}/events?tenant=${encodeURIComponent(t.id)}`,
          events: ORDER_EVENTS,
        }),
        signal: AbortSignal.timeout(15_000),
      });
      const text = await res.text();
      if (res.status !== 201)
        throw new Error(`registering the merchant's endpoint for ${t.id}: HTTP ${res.status} ${text}`);
      this.verifiers.set(t.id, new Webhook((JSON.parse(text) as { secret: string }).secret));
    }
  }

  /** Listens again (on the port it had, once it had one). */
  async up(): Promise<void> {
    if (this.listening) return;
    const server = http.createServer((req, res) => this.receive(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
  }

  /** Down: the listener closed and open connections dropped, so deliveries meet a refused port. */
  async down(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Deliveries refused since the last call (a bad signature, an unknown tenant, a body that is no event). */
  takeRejected(): string[] {
    const out = this.rejected;
    this.rejected = [];
    return out;
  }

  killNow(): void {
    this.server?.closeAllConnections();
    this.server?.close();
    this.server = undefined;
  }

  private receive(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const tenant = new URL(req.url ?? '/', 'http://x').searchParams.get('tenant') ?? '';
      const verifier = this.verifiers.get(tenant);
      let event: { id?: string; type?: string; data?: { object?: { id?: string } } };
      try {
        if (!verifier) throw new Error(`no endpoint registered for tenant ${JSON.stringify(tenant)}`);
        event = verifier.verify(body, req.headers as Record<string, string>) as typeof event;
      } catch (err) {
        this.rejected.push(
          `${String(req.headers['webhook-id'])}: ${err instanceof Error ? err.message : String(err)}`,
        );
        res.writeHead(400).end();
        return;
      }
      const orderId = event.data?.object?.id;
      if (typeof event.id !== 'string' || typeof event.type !== 'string' || typeof orderId !== 'string') {
        this.rejected.push(`${String(event.id)}: not an order event: ${body.slice(0, 120)}`);
        res.writeHead(400).end();
        return;
      }
      // The receiver's own dedupe: an ID already processed is acknowledged, not processed again.
      const processed = !this.processed.has(event.id);
      if (processed) this.processed.add(event.id);
      this.deliveries.push({ eventId: event.id, orderId, type: event.type, processed });
      res.writeHead(204).end();
    });
  }
}
