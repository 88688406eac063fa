/**
 * The client's webhook verifier (`verifyWebhook`) against what the worker really sends: deliveries
 * made by src/merchant-events/send.ts (`sendEvent`, the same code the delivery activity runs) to a
 * real HTTP server on 127.0.0.1 that verifies each with the client. A rotation's two signatures, a
 * wrong secret, a changed body, a stale timestamp and missing headers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  WEBHOOK_EVENT_TYPES,
  WebhookVerificationError,
  verifyWebhook,
  type WebhookEvent,
} from '@onceflow/client';
import { newSigningSecret, sendEvent, signatureHeader } from '../../src/merchant-events/send.ts';
import { MERCHANT_EVENT_TYPES } from '../../src/merchant-events/contract.ts';

interface Verdict {
  event?: WebhookEvent;
  error?: string;
}

/** A receiver that verifies every request with `secrets()` and records what verifyWebhook said. */
let secrets: string | string[] = [];
const verdicts: Verdict[] = [];
let server: http.Server;
let url: string;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        // The raw bytes, never re-serialized JSON: the signature covers them exactly.
        const event = verifyWebhook(secrets, Buffer.concat(chunks), req.headers);
        verdicts.push({ event });
        res.writeHead(204).end();
      } catch (err) {
        verdicts.push({ error: err instanceof WebhookVerificationError ? err.message : String(err) });
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const orderEvent = {
  id: 'evt_0123456789abcdef0123456789abcdef',
  type: 'order.completed',
  createdAt: '2026-12-05T10:00:00.000Z',
  // Unicode in the body: the signature is over its UTF-8 bytes.
  data: {
    object: { id: 'ord_1', object: 'order', status: 'completed', customer: { id: 'café' } },
    version: 4,
  },
};

async function deliver(signWith: string[], body = JSON.stringify(orderEvent), at = new Date()) {
  const before = verdicts.length;
  const res = await sendEvent({
    url,
    eventId: orderEvent.id,
    body,
    secrets: signWith,
    policy: { allowPrivate: true },
    at,
  });
  expect(verdicts.length).toBe(before + 1);
  return { status: res.statusCode, verdict: verdicts[verdicts.length - 1]! };
}

describe('verifyWebhook, on deliveries sendEvent makes', () => {
  it('accepts a delivery signed with the secret and returns the typed event', async () => {
    const secret = newSigningSecret();
    secrets = secret;
    const { status, verdict } = await deliver([secret]);
    expect(verdict).toEqual({ event: orderEvent });
    expect(status).toBe(204);
    const event = verdict.event!;
    if (event.type === 'order.completed') expect(event.data.object.status).toBe('completed');
    else expect.fail(`narrowed to ${event.type}`);
  });

  it('during a rotation (two signatures) accepts either secret, and a list of secrets', async () => {
    const [previous, next] = [newSigningSecret(), newSigningSecret()];
    for (const s of [previous, next, [newSigningSecret(), next]]) {
      secrets = s;
      expect((await deliver([next, previous])).verdict.event?.id).toBe(orderEvent.id);
    }
  });

  it('refuses a wrong secret, a changed body, a stale timestamp and missing headers', async () => {
    secrets = newSigningSecret();
    expect((await deliver([newSigningSecret()])).verdict).toEqual({ error: 'No matching signature found' });

    const at = new Date();
    const body = JSON.stringify(orderEvent);
    const headers = {
      'webhook-id': orderEvent.id,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': signatureHeader([secrets], orderEvent.id, at, body),
    };
    expect(verifyWebhook(secrets, body, headers)).toEqual(orderEvent);
    // The same bytes re-serialized with another spacing are another body.
    expect(() => verifyWebhook(secrets, JSON.stringify(orderEvent, null, 1), headers)).toThrow(
      WebhookVerificationError,
    );
    expect(() => verifyWebhook(secrets, body, { ...headers, 'webhook-id': 'evt_other' })).toThrow(
      WebhookVerificationError,
    );
    const { 'webhook-signature': _omitted, ...unsigned } = headers;
    expect(() => verifyWebhook(secrets, body, unsigned)).toThrow('Missing required headers');

    // Signed correctly, 10 minutes ago: a replay, refused (Standard Webhooks allows 5 minutes).
    const old = new Date(Date.now() - 10 * 60_000);
    expect((await deliver([secrets], body, old)).verdict).toEqual({ error: 'Message timestamp too old' });
  });

  it("reads fetch's Headers as well as Node's req.headers", () => {
    const secret = newSigningSecret();
    const at = new Date();
    const body = JSON.stringify(orderEvent);
    const headers = new Headers({
      'Webhook-Id': orderEvent.id,
      'Webhook-Timestamp': String(Math.floor(at.getTime() / 1000)),
      'Webhook-Signature': signatureHeader([secret], orderEvent.id, at, body),
    });
    expect(verifyWebhook(secret, new TextEncoder().encode(body), headers)).toEqual(orderEvent);
  });
});

it("the client's event types are the API's (the package keeps its own copy)", () => {
  expect([...WEBHOOK_EVENT_TYPES].sort()).toEqual([...MERCHANT_EVENT_TYPES].sort());
});
