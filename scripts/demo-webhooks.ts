/**
 * The demo's merchant: a receiver on loopback, registered as each tenant's webhook endpoint for the
 * order events, that verifies every delivery's Standard Webhooks signature and dedupes on its ID, as
 * docs/API.md asks a receiver to. At the end, every terminal order's event must have arrived.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

const ORDER_EVENTS = ['order.completed', 'order.rejected', 'order.needs_attention'];

export interface DemoMerchant {
  /** Order ID -> the event types received for it (deduplicated by event ID). */
  received: Map<string, Set<string>>;
  /** Deliveries of an event ID already processed (the receiver's dedupe absorbed them). */
  duplicates: number;
  badSignatures: number;
  close(): Promise<void>;
}

export async function startDemoMerchant(
  api: string,
  tenants: { id: string; key: string }[],
): Promise<DemoMerchant> {
  const secrets = new Map<string, Webhook>();
  const seen = new Set<string>();
  const merchant = {
    received: new Map<string, Set<string>>(),
    duplicates: 0,
    badSignatures: 0,
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const tenant = new URL(req.url ?? '/', 'http://x').searchParams.get('tenant') ?? '';
      let event: { id: string; type: string; data: { object: { id: string } } };
      try {
        event = secrets.get(tenant)!.verify(body, req.headers as Record<string, string>) as typeof event;
      } catch {
        merchant.badSignatures++;
        res.writeHead(400).end();
        return;
      }
      if (seen.has(event.id)) merchant.duplicates++;
      else {
        seen.add(event.id);
        const types = merchant.received.get(event.data.object.id) ?? new Set<string>();
        types.add(event.type);
        merchant.received.set(event.data.object.id, types);
      }
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const endpoints: { tenant: { key: string }; id: string }[] = [];
  for (const t of tenants) {
    const res = await fetch(`${api}/v1/webhook-endpoints`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${t.key}`,
        'idempotency-key': randomUUID(),
        'content-type': 'application/json',
      },
      body: JSON.stringify({ url: `http://127.0.0.1:${port}/events?tenant=${t.id}`, events: ORDER_EVENTS }),
    });
    const created = (await res.json()) as { id: string; secret: string; detail?: string };
    if (res.status !== 201)
      throw new Error(`registering the demo's webhook endpoint: ${res.status} ${created.detail}`);
    secrets.set(t.id, new Webhook(created.secret));
    endpoints.push({ tenant: t, id: created.id });
  }
  return Object.assign(merchant, {
    async close() {
      // Removed, so later runs' events are not retried against a receiver that is gone.
      for (const e of endpoints) {
        await fetch(`${api}/v1/webhook-endpoints/${e.id}`, {
          method: 'DELETE',
          headers: { authorization: `Bearer ${(e.tenant as { key: string }).key}` },
        }).catch(() => undefined);
      }
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

/** Orders whose terminal event has not arrived, after waiting up to `timeoutMs` for the stragglers. */
export async function missingEvents(
  merchant: DemoMerchant,
  orders: { id: string; status: string }[],
  timeoutMs: number,
): Promise<string[]> {
  const missing = () =>
    orders.filter((o) => !merchant.received.get(o.id)?.has(`order.${o.status}`)).map((o) => o.id);
  const deadline = Date.now() + timeoutMs;
  while (missing().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
  return missing();
}
