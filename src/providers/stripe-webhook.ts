/**
 * Stripe's webhook signature via `stripe.webhooks.constructEvent`; failures as WebhookSignatureError, so
 * the route treats both alike.
 */
import Stripe from 'stripe';
import { WebhookSignatureError } from './webhook-signature.ts';

export const STRIPE_SIGNATURE_HEADER = 'Stripe-Signature';
const TOLERANCE_SEC = 300;

/** A verifier that accepts any of `secrets` (the current one first; a rotation adds the previous). */
export function stripeSignatureVerifier(
  secrets: readonly string[],
): (rawBody: Buffer | string, header: string | string[] | undefined) => void {
  // constructEvent calls nothing: the API key is never used, but the client needs one.
  const stripe = new Stripe('sk_test_signature_verification_only', { telemetry: false });
  return (rawBody, header) => {
    if (typeof header !== 'string' || header.trim() === '') {
      throw new WebhookSignatureError('malformed', `missing ${STRIPE_SIGNATURE_HEADER} header`);
    }
    let last: unknown;
    for (const secret of secrets) {
      try {
        stripe.webhooks.constructEvent(rawBody, header, secret, TOLERANCE_SEC);
        return;
      } catch (err) {
        last = err;
      }
    }
    const message = last instanceof Error ? last.message : String(last);
    if (/Unable to extract|No signatures found with expected scheme/.test(message)) {
      throw new WebhookSignatureError('malformed', message);
    }
    if (/Timestamp outside the tolerance/.test(message)) {
      throw new WebhookSignatureError('stale_timestamp', message);
    }
    throw new WebhookSignatureError('bad_signature', message);
  };
}
