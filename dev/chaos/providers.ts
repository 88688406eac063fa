/**
 * `npm run chaos -- --providers stripe,smtp`: the stack's processes use the
 * real adapters. `stripe`: PAYMENT_PROVIDER=stripe against the sandbox's Stripe
 * surface (same faults, same audit tables). `smtp`: EMAIL_PROVIDER=smtp to a
 * local SMTP server started here (dev/mail), whose mailbox is then the ground
 * truth for receipts, one per Message-ID (a resend of one receipt under the
 * at-least-once policy carries the same Message-ID, so it is the same receipt).
 */
import { downstreamKey } from 'onceflow';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { REFUND_OPERATION_TYPES } from '../../src/refunds/contract.ts';
import { startMailServer, type RunningMailServer } from '../mail/server.ts';
import type { MoneyEffect } from './invariants.ts';

export const PROVIDER_CHOICES = ['stripe', 'smtp'] as const;
let mail: RunningMailServer | undefined;

/** Sets the environment the stack's processes inherit; call before the stack starts. */
export async function applyChaosProviders(providers: readonly string[]): Promise<void> {
  if (providers.includes('stripe')) process.env.PAYMENT_PROVIDER = 'stripe';
  if (providers.includes('smtp')) {
    mail = await startMailServer();
    process.env.EMAIL_PROVIDER = 'smtp';
    process.env.SMTP_URL = mail.smtpUrl;
  }
}

/**
 * The downstream key a mailed receipt was sent under, from the operation key
 * it carries (X-Onceflow-Operation), as the sandbox's audit lists it: so an
 * order's receipt and its refunds' receipts (which name the order too) are
 * told apart by key, whichever provider sent them. Null for an unknown shape.
 */
function sentUnder(operationKey: string): string | null {
  const m = /^(order|refund)\/([^/]+)\/[^/]+\/receipt$/.exec(operationKey);
  if (!m) return null;
  const operationType = m[1] === 'refund' ? REFUND_OPERATION_TYPES.receipt : OPERATION_TYPES.receipt;
  return downstreamKey({ tenantId: m[2]!, operationType, key: operationKey });
}

/** The receipts in the SMTP mailbox, or null when receipts go to the sandbox. */
export function mailboxReceipts(): MoneyEffect[] | null {
  if (!mail) return null;
  const byId = new Map<string, MoneyEffect>();
  for (const m of mail.messages()) {
    const id = m.messageId ?? '';
    byId.set(id, {
      idempotencyKey: sentUnder(m.headers['x-onceflow-operation'] ?? '') ?? id,
      orderId: m.headers['x-onceflow-order'] ?? '',
      status: 'sent',
    });
  }
  return [...byId.values()];
}

export async function stopChaosProviders(): Promise<void> {
  await mail?.close();
  mail = undefined;
}
