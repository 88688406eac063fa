/**
 * Which provider adapters the order stacks use: the sandbox clients by
 * default; with PAYMENT_PROVIDER=stripe the Stripe adapter against the
 * sandbox's Stripe surface (same account, same faults, same audit), with
 * EMAIL_PROVIDER=smtp the SMTP adapter against a real local SMTP server
 * (dev/mail). So the order and fault tests run unchanged through either:
 *
 *   PAYMENT_PROVIDER=stripe EMAIL_PROVIDER=smtp npx vitest run test/orders/order-faults.test.ts
 */
import { loadConfig } from '../../src/config.ts';
import { SANDBOX_STRIPE_KEY } from '../../src/config/providers.ts';
import { createSmtpEmailProvider } from '../../src/providers/smtp.ts';
import { createStripePaymentProvider } from '../../src/providers/stripe.ts';
import type { EmailProvider, PaymentProvider } from '../../src/providers/types.ts';
import { startMailServer, type RunningMailServer, type StoredMail } from '../../dev/mail/server.ts';

const DAY = 24 * 60 * 60 * 1000;
/** What the Stripe adapter declares as its search lag in tests; the sandbox's index has none. */
const TEST_SEARCH_LAG_MS = 1_000;

/** A receipt in the mailbox, shaped like the sandbox's audit rows. */
interface Receipt {
  id: string;
  status: 'succeeded';
  idempotency_key: string;
  order_id: string | null;
  subject: string | null;
  mail: StoredMail;
  [k: string]: unknown;
}

export interface TestProviders {
  payments: PaymentProvider | undefined;
  email: EmailProvider | undefined;
  mail: RunningMailServer | undefined;
  /** Receipts in the mailbox for an order, one per Message-ID (a resend of one receipt is not a second receipt). */
  receipts(orderId?: string): Promise<Receipt[]>;
  /** The sandbox fault vocabulary, for `messages.create`, mapped onto the SMTP server's faults. */
  mailFault(kind: string, count: number, delayMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function testProviders(opts: {
  sandboxUrl: string;
  timeoutMs: number;
  keyWindowMs: number | undefined;
}): Promise<TestProviders> {
  const { providers } = loadConfig(process.env);
  const payments =
    providers.payment === 'stripe'
      ? createStripePaymentProvider({
          secretKey: SANDBOX_STRIPE_KEY,
          apiBase: opts.sandboxUrl,
          timeoutMs: opts.timeoutMs,
          keyWindowMs: opts.keyWindowMs ?? DAY,
          searchLagMs: TEST_SEARCH_LAG_MS,
        })
      : undefined;
  const mail = providers.email === 'smtp' ? await startMailServer() : undefined;
  const email = mail
    ? createSmtpEmailProvider({
        url: mail.smtpUrl,
        from: 'receipts@onceflow.invalid',
        timeoutMs: opts.timeoutMs,
        uncertainPolicy: providers.smtp.uncertainPolicy,
      })
    : undefined;
  return {
    payments,
    email,
    mail,
    async receipts(orderId) {
      const seen = new Set<string>();
      const out: Receipt[] = [];
      for (const m of mail?.messages() ?? []) {
        const order = m.headers['x-onceflow-order'] ?? null;
        if (orderId !== undefined && order !== orderId) continue;
        const id = m.messageId ?? '';
        if (seen.has(id)) continue;
        seen.add(id);
        out.push({
          id,
          status: 'succeeded',
          idempotency_key: id,
          order_id: order,
          subject: m.subject,
          mail: m,
        });
      }
      return out;
    },
    async mailFault(kind, count, delayMs) {
      if (!mail) throw new Error('no mail server');
      // Refused before the data: nothing delivered. Everything else: delivered, answer lost.
      if (kind === 'fail_before') mail.fault({ kind: 'reject_temporary', count });
      else mail.fault({ kind: 'delay_after_data', count, delayMs: delayMs ?? opts.timeoutMs * 3 });
    },
    async close() {
      await mail?.close();
    },
  };
}
