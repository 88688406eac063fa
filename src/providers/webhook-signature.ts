/**
 * Webhook signatures, Stripe style:
 *
 *   Onceflow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, `${t}.${rawBody}`)>
 *
 * The timestamp is signed with the body, so a captured request can't be
 * replayed after the tolerance window. Verify against the RAW request body
 * (the exact bytes received), never a re-serialised JSON object.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'Onceflow-Signature';

export type WebhookSignatureFailure = 'bad_signature' | 'stale_timestamp' | 'malformed';

export class WebhookSignatureError extends Error {
  override name = 'WebhookSignatureError';
  constructor(
    readonly reason: WebhookSignatureFailure,
    message: string,
  ) {
    super(message);
  }
}

export interface VerifiedWebhook {
  /** The signed timestamp (unix seconds). */
  timestampSec: number;
}

function hmacHex(secret: string, rawBody: string | Buffer, timestampSec: number): string {
  return createHmac('sha256', secret).update(`${timestampSec}.`).update(rawBody).digest('hex');
}

/** The header value for `rawBody` signed at `timestampSec`. */
export function signWebhook(secret: string, rawBody: string | Buffer, timestampSec: number): string {
  if (!Number.isInteger(timestampSec)) throw new TypeError('timestampSec must be an integer (unix seconds)');
  return `t=${timestampSec},v1=${hmacHex(secret, rawBody, timestampSec)}`;
}

/**
 * Returns the verified timestamp or throws `WebhookSignatureError`. Any `v1=` entry matching any of
 * `secrets` is enough, so rotation works from both ends.
 */
export function verifyWebhook(
  secret: string | readonly string[],
  rawBody: string | Buffer,
  header: string | string[] | undefined,
  {
    toleranceSec = 300,
    nowSec = Math.floor(Date.now() / 1000),
  }: { toleranceSec?: number; nowSec?: number } = {},
): VerifiedWebhook {
  if (typeof header !== 'string' || header.length === 0 || header.length > 4096) {
    throw new WebhookSignatureError('malformed', `missing or malformed ${SIGNATURE_HEADER} header`);
  }
  let timestampSec: number | undefined;
  const signatures: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new WebhookSignatureError('malformed', `malformed ${SIGNATURE_HEADER} header`);
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't') {
      if (!/^\d{1,12}$/.test(value) || timestampSec !== undefined) {
        throw new WebhookSignatureError('malformed', `malformed timestamp in ${SIGNATURE_HEADER} header`);
      }
      timestampSec = Number(value);
    } else if (name === 'v1') {
      if (!/^[0-9a-f]{64}$/.test(value)) {
        throw new WebhookSignatureError('malformed', `malformed v1 signature in ${SIGNATURE_HEADER} header`);
      }
      signatures.push(value);
    }
    // Unknown schemes (e.g. a future v2) are ignored, as Stripe does.
  }
  if (timestampSec === undefined || signatures.length === 0) {
    throw new WebhookSignatureError('malformed', `${SIGNATURE_HEADER} header needs t= and v1=`);
  }
  const secrets = typeof secret === 'string' ? [secret] : secret;
  if (secrets.length === 0 || secrets.some((s) => s.length === 0)) {
    throw new TypeError('verifyWebhook needs at least one non-empty secret');
  }
  // Compare every candidate in constant time; don't stop at the first match.
  let ok = false;
  for (const s of secrets) {
    const expected = Buffer.from(hmacHex(s, rawBody, timestampSec), 'hex');
    for (const sig of signatures) {
      if (timingSafeEqual(expected, Buffer.from(sig, 'hex'))) ok = true;
    }
  }
  if (!ok) throw new WebhookSignatureError('bad_signature', 'webhook signature does not match');
  // Checked after the signature, so a forged header learns nothing about the clock.
  if (Math.abs(nowSec - timestampSec) > toleranceSec) {
    throw new WebhookSignatureError(
      'stale_timestamp',
      `webhook timestamp outside the ${toleranceSec}s tolerance`,
    );
  }
  return { timestampSec };
}
