import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { ProviderError, type ChargeRequest } from '../../src/providers/types.ts';
import { uniq } from '../support/env.ts';
import { startTestSandbox, type TestSandbox } from './harness.ts';

const req = (overrides: Partial<ChargeRequest> = {}): ChargeRequest => ({
  amount: 1250,
  currency: 'usd',
  paymentMethod: 'pm_card_visa',
  description: 'order',
  metadata: { order_id: uniq('ord'), tenant_id: 't' },
  receiptEmail: 'buyer@example.com',
  ...overrides,
});

async function caught(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

describe('sandbox provider clients against the real sandbox', () => {
  let sb: TestSandbox;
  beforeAll(async () => {
    sb = await startTestSandbox({ dispatch: false });
  });
  afterAll(async () => {
    await sb?.stop();
  });
  const payments = () => createSandboxPaymentProvider({ baseUrl: sb.url, timeoutMs: 5_000 });

  it('200 -> Charge; the replay is the same Charge', async () => {
    const r = req();
    const key = uniq('k');
    const charge = await payments().createCharge(r, key);
    expect(charge).toMatchObject({
      status: 'succeeded',
      amount: 1250,
      currency: 'usd',
      idempotencyKey: key,
      metadata: r.metadata,
    });
    expect(charge.id).toMatch(/^ch_/);
    expect(charge.failureCode).toBeUndefined();
    expect(new Date(charge.created).toISOString()).toBe(charge.created);
    expect(await payments().createCharge(r, key)).toEqual(charge);
    expect(await payments().findChargeByIdempotencyKey(key)).toEqual(charge);
    expect(await payments().findChargeByIdempotencyKey(uniq('none'))).toBeNull();
  });

  it('402 decline -> a Charge with status failed, not an error', async () => {
    const key = uniq('k');
    const charge = await payments().createCharge(req({ paymentMethod: 'pm_card_chargeDeclined' }), key);
    expect(charge).toMatchObject({ status: 'failed', failureCode: 'card_declined', idempotencyKey: key });
    expect(await payments().findChargeByIdempotencyKey(key)).toEqual(charge);
  });

  it('400 idempotency mismatch -> key_conflict, NOT definite (the first request may have acted); 400 validation -> rejected, definite', async () => {
    const key = uniq('k');
    await payments().createCharge(req(), key);
    const mismatch = await caught(payments().createCharge(req({ amount: 1 }), key));
    expect(mismatch).toMatchObject({
      kind: 'key_conflict',
      definite: false,
      status: 400,
      code: 'idempotency_key_reused',
    });
    const invalid = await caught(payments().createCharge(req({ paymentMethod: 'pm_nope' }), uniq('k')));
    expect(invalid).toMatchObject({
      kind: 'rejected',
      definite: true,
      status: 400,
      code: 'invalid_request_error',
    });
    const floaty = await caught(payments().createCharge(req({ amount: 12.5 }), uniq('k')));
    expect(floaty.kind).toBe('rejected');
  });

  it('email: 200 -> Message, replay, lookup, 5xx -> uncertain', async () => {
    const email = createSandboxEmailProvider({ baseUrl: sb.url, timeoutMs: 5_000 });
    const key = uniq('k');
    const m = { to: 'buyer@example.com', subject: 'Receipt', text: 'Paid', metadata: { order_id: 'o' } };
    const sent = await email.sendMessage(m, key);
    expect(sent).toMatchObject({ status: 'sent', to: 'buyer@example.com', idempotencyKey: key });
    expect(await email.sendMessage(m, key)).toEqual(sent);
    expect(await email.findMessageByIdempotencyKey(key)).toEqual(sent);
    await sb.call('POST', '/_sandbox/faults', { body: { endpoint: 'messages.create', kind: 'fail_after' } });
    const err = await caught(email.sendMessage({ ...m, subject: 'other' }, uniq('k')));
    expect(err).toMatchObject({ kind: 'uncertain', definite: false, status: 500 });
  });
});

describe('sandbox provider clients: status mapping against a scripted server', () => {
  let server: http.Server;
  let baseUrl: string;
  let next: { status: number; body: string; hang?: boolean } = { status: 200, body: '{}' };

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (next.hang) return; // never answers
        res.writeHead(next.status, { 'content-type': 'application/json' }).end(next.body);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  const cases: [number, string, ProviderError['kind'], boolean][] = [
    [409, '{"error":{"type":"idempotency_error","code":"idempotency_key_in_use"}}', 'in_progress', false],
    [400, '{"error":{"type":"invalid_request_error","message":"bad"}}', 'rejected', true],
    [404, '{"error":{"type":"invalid_request_error"}}', 'rejected', true],
    [429, '{"error":{"type":"rate_limit_error"}}', 'uncertain', false],
    [500, '{"error":{"type":"api_error"}}', 'uncertain', false],
    [502, '<html>bad gateway</html>', 'uncertain', false],
    [503, '', 'uncertain', false],
    [200, '{"id":"not a charge"}', 'uncertain', false],
    [200, 'not json', 'uncertain', false],
  ];

  for (const [status, body, kind, definite] of cases) {
    it(`createCharge: HTTP ${status} ${body.slice(0, 30)} -> ${kind}`, async () => {
      next = { status, body };
      const p = createSandboxPaymentProvider({ baseUrl, timeoutMs: 2_000 });
      const err = await caught(p.createCharge(req(), uniq('k')));
      expect(err.kind).toBe(kind);
      expect(err.definite).toBe(definite);
      expect(err.status).toBe(status);
    });
  }

  it('a lookup that gets 5xx is uncertain, not "not found"', async () => {
    next = { status: 500, body: '{"error":{"type":"api_error"}}' };
    const p = createSandboxPaymentProvider({ baseUrl, timeoutMs: 2_000 });
    expect(await caught(p.findChargeByIdempotencyKey('k'))).toMatchObject({ kind: 'uncertain', status: 500 });
  });

  it('no response within timeoutMs -> uncertain timeout', async () => {
    next = { status: 200, body: '', hang: true };
    const p = createSandboxPaymentProvider({ baseUrl, timeoutMs: 100 });
    expect(await caught(p.createCharge(req(), uniq('k')))).toMatchObject({
      kind: 'uncertain',
      code: 'timeout',
    });
  });

  it('connection refused -> not_sent, definite (no byte of the request left)', async () => {
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const p = createSandboxEmailProvider({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 1_000 });
    const err = await caught(p.sendMessage({ to: 'a@b.co', subject: 's', text: 't', metadata: {} }, 'k'));
    expect(err).toMatchObject({ kind: 'not_sent', definite: true, code: 'connection_refused' });
  });

  it('a host name that does not resolve -> not_sent, definite', async () => {
    const p = createSandboxPaymentProvider({
      baseUrl: 'http://onceflow-no-such-host.invalid',
      timeoutMs: 5_000,
    });
    const err = await caught(p.createCharge(req(), uniq('k')));
    expect(err).toMatchObject({ kind: 'not_sent', definite: true, code: 'dns' });
  });

  it('a connection cut after the request was sent -> uncertain, not not_sent', async () => {
    const cutter = net.createServer((socket) => socket.once('data', () => socket.destroy()));
    await new Promise<void>((r) => cutter.listen(0, '127.0.0.1', r));
    const port = (cutter.address() as AddressInfo).port;
    try {
      const p = createSandboxPaymentProvider({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 2_000 });
      expect(await caught(p.createCharge(req(), uniq('k')))).toMatchObject({
        kind: 'uncertain',
        definite: false,
        code: 'network',
      });
    } finally {
      await new Promise<void>((r) => cutter.close(() => r()));
    }
  });

  it('a 402 with only a charge id (Stripe Charges style) still maps to a failed Charge', async () => {
    next = { status: 402, body: '{"error":{"type":"card_error","code":"card_declined","charge":"ch_123"}}' };
    const p = createSandboxPaymentProvider({ baseUrl, timeoutMs: 2_000 });
    const r = req();
    const charge = await p.createCharge(r, 'key-1');
    expect(charge).toMatchObject({
      id: 'ch_123',
      status: 'failed',
      failureCode: 'card_declined',
      idempotencyKey: 'key-1',
    });
    expect(charge.metadata).toEqual(r.metadata);
  });
});
