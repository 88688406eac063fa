/**
 * Verifying onceflow's webhook deliveries: the Standard Webhooks signature (the `standardwebhooks`
 * package, re-exported here), and the event envelope's types.
 *
 * A delivery is a POST whose body is `{id, type, createdAt, data: {object, version}}`, signed with
 * the endpoint's secret (`whsec_…`): `webhook-signature` holds one `v1,<base64 HMAC-SHA256 of
 * "<webhook-id>.<webhook-timestamp>.<body>">` per live secret, space-separated during a rotation.
 * docs/API.md "Events (webhooks)" has the whole contract.
 */
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import type { components } from './schema.d.ts';

export { Webhook, WebhookVerificationError } from 'standardwebhooks';

type Schemas = components['schemas'];

/** The event types an endpoint can subscribe to (the API's list; test/client/webhooks.test.ts keeps the two equal). */
export type WebhookEventType = Schemas['WebhookEndpoint']['events'][number];
export type OrderEventType = Extract<WebhookEventType, `order.${string}`>;
export type RefundEventType = Extract<WebhookEventType, `refund.${string}`>;

export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = [
  'order.completed',
  'order.rejected',
  'order.needs_attention',
  'refund.succeeded',
  'refund.failed',
  'refund.needs_attention',
];

interface EventEnvelope<T extends WebhookEventType, O> {
  /** `evt_…`, the same as the `webhook-id` header and the same on every retry: deduplicate on it. */
  id: string;
  type: T;
  /** When the transition happened (not when this attempt was sent). */
  createdAt: string;
  data: {
    /** The order or refund exactly as GET returns it, as the transition left it. */
    object: O;
    /** The object's status sequence: an event with a lower version than one applied is stale. */
    version: number;
  };
}

export type OrderEvent = EventEnvelope<OrderEventType, Schemas['OrderDetail']>;
export type RefundEvent = EventEnvelope<RefundEventType, Schemas['Refund']>;
/** A delivery's body; narrow on `type`. */
export type WebhookEvent = OrderEvent | RefundEvent;

/**
 * Request headers as Node's `req.headers` (IncomingHttpHeaders) or fetch's `Headers` give them.
 * Names are matched case-insensitively.
 */
export type WebhookHeaders =
  | { forEach(callback: (value: string, name: string) => void): void }
  | Record<string, string | readonly string[] | undefined>;

function plainHeaders(headers: WebhookHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof headers.forEach === 'function') {
    (headers as { forEach(cb: (value: string, name: string) => void): void }).forEach((value, name) => {
      out[name.toLowerCase()] = value;
    });
    return out;
  }
  for (const [name, value] of Object.entries(
    headers as Record<string, string | readonly string[] | undefined>,
  )) {
    if (value === undefined) continue;
    // A repeated header: its values, space-separated, as webhook-signature lists signatures.
    out[name.toLowerCase()] = typeof value === 'string' ? value : value.join(' ');
  }
  return out;
}

/**
 * Verifies one delivery and returns its event. `body` must be the raw request body, exactly as
 * received (a string or the bytes), never re-serialized JSON. `secret` is the endpoint's `whsec_…`
 * secret, or several (e.g. the old and the new one while you roll a rotation out): any one matching
 * is enough.
 *
 * Throws WebhookVerificationError when the headers are missing, no signature matches, or
 * `webhook-timestamp` is more than 5 minutes from now (a replayed request): answer 400 then.
 */
export function verifyWebhook(
  secret: string | readonly string[],
  body: string | Uint8Array,
  headers: WebhookHeaders,
): WebhookEvent {
  const secrets = typeof secret === 'string' ? [secret] : secret;
  if (secrets.length === 0) throw new TypeError('verifyWebhook needs at least one secret');
  const plain = plainHeaders(headers);
  let failure: unknown;
  for (const s of secrets) {
    try {
      const event = new Webhook(s).verify(body, plain) as WebhookEvent | undefined;
      if (event === undefined) throw new WebhookVerificationError('Empty body');
      if (event.id !== plain['webhook-id'])
        throw new WebhookVerificationError('The body id differs from webhook-id');
      return event;
    } catch (err) {
      if (!(err instanceof WebhookVerificationError)) throw err;
      failure = err;
    }
  }
  throw failure;
}
