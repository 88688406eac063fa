/**
 * Receipts over SMTP (src/providers/smtp.ts, nodemailer) against a real SMTP
 * server (dev/mail, the smtp-server package): the Message-ID derived from the
 * key, the error kinds, and the declared policy for an uncertain send
 * (src/steps/receipt.ts) on the real ledger, counted in the mailbox.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Ledger, isLedgerError } from 'onceflow';
import { createSmtpEmailProvider, messageIdFor } from '../../src/providers/smtp.ts';
import { ProviderError, type MessageRequest, type UncertainSendPolicy } from '../../src/providers/types.ts';
import { runReceipt } from '../../src/steps/receipt.ts';
import { startMailServer, type RunningMailServer } from '../../dev/mail/server.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { orderWorkflowId, stepKeys } from '../../src/orders/model.ts';

const FROM = 'Shop receipts <receipts@shop.example>';
let pool: Pool;
let mail: RunningMailServer;
beforeAll(async () => {
  pool = testPool(4);
  mail = await startMailServer();
});
afterAll(async () => {
  await mail?.close();
  await pool?.end();
});
beforeEach(() => mail.clear());

const smtp = (opts: { timeoutMs?: number; policy?: UncertainSendPolicy; url?: string } = {}) =>
  createSmtpEmailProvider({
    url: opts.url ?? mail.smtpUrl,
    from: FROM,
    timeoutMs: opts.timeoutMs ?? 5_000,
    uncertainPolicy: opts.policy ?? 'at_least_once',
  });

function message(to = 'buyer@example.com'): MessageRequest {
  const orderId = uniq('ord');
  return {
    to,
    subject: `Receipt for order ${orderId}`,
    text: 'We received 25.00 USD.',
    metadata: { order_id: orderId, tenant_id: 'acme', operation_key: `k/${orderId}` },
  };
}

async function caught(p: Promise<unknown>): Promise<ProviderError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ProviderError);
  return err as ProviderError;
}

describe('the SMTP email adapter', () => {
  it('sends with a Message-ID derived from the key: the same for every send of one receipt', async () => {
    const key = uniq('dk');
    const a = await smtp().sendMessage(message(), key);
    const b = await smtp().sendMessage(message(), key);
    expect(a.id).toBe(messageIdFor(key, FROM));
    expect(b.id).toBe(a.id);
    expect(a.id).toMatch(/^<receipt\.[0-9a-f]{40}@shop\.example>$/);
    expect(a.id).not.toContain(key);
    expect(messageIdFor(uniq('dk'), FROM)).not.toBe(a.id);
    const got = mail.messages();
    expect(got.map((m) => m.messageId)).toEqual([a.id, a.id]);
    expect(got[0]).toMatchObject({
      to: ['buyer@example.com'],
      subject: expect.stringMatching(/^Receipt for order/),
    });
  });

  it('a temporary refusal is not_sent, a permanent one rejected; nothing kept', async () => {
    mail.fault({ kind: 'reject_temporary' });
    expect(await caught(smtp().sendMessage(message(), uniq('dk')))).toMatchObject({
      kind: 'not_sent',
      code: 'smtp_451',
      definite: true,
    });
    mail.fault({ kind: 'reject_permanent' });
    expect(await caught(smtp().sendMessage(message(), uniq('dk')))).toMatchObject({
      kind: 'rejected',
      code: 'smtp_550',
    });
    expect(mail.messages()).toEqual([]);
  });

  it('a refused connection is not_sent', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    expect(
      await caught(smtp({ url: `smtp://127.0.0.1:${closed}` }).sendMessage(message(), 'k')),
    ).toMatchObject({
      kind: 'not_sent',
      code: 'connection_refused',
    });
  });

  it('no answer after the data is uncertain, though the message was delivered', async () => {
    mail.fault({ kind: 'delay_after_data', delayMs: 1_500 });
    expect(await caught(smtp({ timeoutMs: 500 }).sendMessage(message(), uniq('dk')))).toMatchObject({
      kind: 'uncertain',
      definite: false,
    });
    expect(mail.messages()).toHaveLength(1);
  });
});

describe('the receipt step over SMTP: the declared policy for an uncertain send', () => {
  const receiptInput = () => {
    const orderId = uniq('ord');
    const workflowId = orderWorkflowId('acme', orderId);
    return {
      tenantId: 'acme',
      orderId,
      key: stepKeys.receipt(workflowId),
      to: 'buyer@example.com',
      amount: 2500,
      currency: 'usd',
      chargeId: 'pi_test',
    };
  };

  it('at_least_once: sends again under the same Message-ID; the mailbox holds two copies of one receipt', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const email = smtp({ timeoutMs: 500, policy: 'at_least_once' });
    const input = receiptInput();
    mail.fault({ kind: 'delay_after_data', delayMs: 1_500 });
    const first = await runReceipt({ ledger, email }, input).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(first, 'outcome_unknown')).toBe(true);
    const r = await runReceipt({ ledger, email }, input);
    const ids = mail.messages().map((m) => m.messageId);
    expect(ids).toEqual([r.messageId, r.messageId]);
    // Settled now: a retry replays, sending nothing.
    expect(await runReceipt({ ledger, email }, input)).toMatchObject({ replayed: true });
    expect(mail.messages()).toHaveLength(2);
  });

  it('at_most_once: never sends again; the receipt stays unknown for an operator', async () => {
    const ledger = new Ledger(pool, { leaseMs: 5_000 });
    const email = smtp({ timeoutMs: 500, policy: 'at_most_once' });
    const input = receiptInput();
    mail.fault({ kind: 'delay_after_data', delayMs: 1_500 });
    await runReceipt({ ledger, email }, input).catch(() => undefined);
    const again = await runReceipt({ ledger, email }, input).then(
      () => null,
      (e: unknown) => e,
    );
    expect(isLedgerError(again, 'outcome_unknown')).toBe(true);
    expect(mail.messages()).toHaveLength(1);
  });
});
