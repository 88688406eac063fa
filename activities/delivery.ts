/**
 * The delivery activity: one (endpoint, event) pair, claimed through the core (`externalStep`
 * under `<delivery workflow ID>/deliver`), so a retried, reset or concurrently run attempt never
 * sends after a 2xx was recorded.
 *
 * Delivery is at least once: a receiver's answer can always be lost, so a lost one is sent again
 * (reconcile answers not_found) and the receiver dedupes on `webhook-id`. A non-2xx or no answer
 * fails the attempt; it is retried with exponential backoff and jitter until the retry window
 * passes, then the delivery is marked failed (an operator can redeliver it).
 */
import { ApplicationFailure } from '@temporalio/activity';
import { backoffMs } from 'onceflow/postgres';
import { externalStep, type Ledger } from 'onceflow';
import type { Pool } from '../src/db/index.ts';
import { log as appLog } from '../src/log.ts';
import {
  DELIVERY_FAILURE,
  DELIVERY_OPERATION_TYPE,
  type DeliveryOutcome,
  type DeliveryWorkflowInput,
} from '../src/merchant-events/contract.ts';
import { eventBody } from '../src/merchant-events/payload.ts';
import { sendEvent, type UrlPolicy } from '../src/merchant-events/send.ts';
import {
  deliveryContext,
  recordAttempt,
  settleDelivery,
  signingSecrets,
} from '../src/merchant-events/sql.ts';

interface DeliverySettings extends UrlPolicy {
  /** How long a delivery is retried before it is marked failed. Default 3 days. */
  retryWindowMs: number;
  /** The first retry's delay (later ones double, with jitter, up to maxRetryMs). */
  firstRetryMs: number;
  maxRetryMs: number;
  /** Attempts in flight per endpoint in one worker: a slow endpoint holds at most this many slots. */
  perEndpoint: number;
  /** Attempts in flight in one worker, all endpoints: the rest of its activity slots stay for orders. */
  total: number;
}

const DEFAULT_DELIVERY_SETTINGS: DeliverySettings = {
  allowPrivate: false,
  retryWindowMs: 3 * 24 * 60 * 60 * 1000,
  firstRetryMs: 5_000,
  maxRetryMs: 60 * 60 * 1000,
  perEndpoint: 2,
  total: 8,
};

export interface DeliveryActivityDeps {
  pool: Pool;
  ledger: Ledger;
  webhooks?: Partial<DeliverySettings>;
}

/** Bounds attempts in flight per endpoint and in all; a refused attempt comes back after a short wait. */
class Slots {
  #total = 0;
  readonly #byEndpoint = new Map<string, number>();
  constructor(private readonly limits: Pick<DeliverySettings, 'perEndpoint' | 'total'>) {}

  take(endpointId: string): (() => void) | null {
    const used = this.#byEndpoint.get(endpointId) ?? 0;
    if (used >= this.limits.perEndpoint || this.#total >= this.limits.total) return null;
    this.#byEndpoint.set(endpointId, used + 1);
    this.#total++;
    return () => {
      this.#total--;
      const left = (this.#byEndpoint.get(endpointId) ?? 1) - 1;
      if (left > 0) this.#byEndpoint.set(endpointId, left);
      else this.#byEndpoint.delete(endpointId);
    };
  }
}

class AttemptFailed extends Error {
  // The ledger releases the claim: nothing under the key needs reconciling (delivery is at least once).
  readonly definite = true;
}

export function createDeliveryActivities(deps: DeliveryActivityDeps) {
  const settings: DeliverySettings = { ...DEFAULT_DELIVERY_SETTINGS, ...deps.webhooks };
  const slots = new Slots(settings);
  const { pool, ledger } = deps;

  return {
    async deliverEvent(input: DeliveryWorkflowInput): Promise<DeliveryOutcome> {
      const delivery = await deliveryContext(pool, input);
      if (!delivery) {
        throw ApplicationFailure.create({
          type: 'DeliveryNotFound',
          message: `no delivery of ${input.eventId} to ${input.endpointId} for tenant ${input.tenantId}`,
          nonRetryable: true,
        });
      }
      const { endpoint, event } = delivery;
      if (delivery.status === 'succeeded') return 'succeeded';
      if (endpoint.deleted_at) {
        await settleDelivery(pool, input.endpointId, input.eventId, 'failed');
        return 'skipped';
      }
      const release = slots.take(input.endpointId);
      if (!release) {
        throw ApplicationFailure.create({
          type: 'DeliveryBusy',
          message: 'this worker is at its delivery limit for the endpoint; trying again shortly',
          nextRetryDelay: 500 + Math.round(Math.random() * 1500),
        });
      }
      let before = 0;
      try {
        const body = await eventBody(pool, ledger, event);
        await externalStep(ledger, 'deliver', {
          tenant: input.tenantId,
          type: DELIVERY_OPERATION_TYPE,
          input: { endpointId: input.endpointId, eventId: input.eventId },
          // Sending again is always allowed (at least once): the window only has to outlast the retries.
          keyWindowMs: settings.retryWindowMs * 2,
          reconcile: () => Promise.resolve({ state: 'not_found' }),
          perform: async () => {
            const startedAt = new Date();
            const res = await sendEvent({
              url: endpoint.url,
              eventId: event.id,
              body,
              secrets: signingSecrets(endpoint),
              policy: settings,
              at: startedAt,
            });
            before = await recordAttempt(pool, {
              endpointId: input.endpointId,
              eventId: input.eventId,
              startedAt,
              latencyMs: res.latencyMs,
              statusCode: res.statusCode,
              error: res.error,
              responseExcerpt: res.excerpt,
            });
            if (!res.ok) throw new AttemptFailed(res.error ?? `the endpoint answered ${res.statusCode}`);
            return { state: 'succeeded', result: { statusCode: res.statusCode } };
          },
        });
      } catch (err) {
        if (!(err instanceof AttemptFailed)) throw err;
        // A redelivery gets a whole window of its own.
        const age = Date.now() - delivery.window_start.getTime();
        if (age >= settings.retryWindowMs) {
          throw ApplicationFailure.create({
            type: DELIVERY_FAILURE.expired,
            message: `no 2xx within the retry window: ${err.message}`,
            nonRetryable: true,
          });
        }
        const delay = backoffMs(
          { initialMs: settings.firstRetryMs, maxMs: settings.maxRetryMs, jitter: 0.5 },
          before,
        );
        throw ApplicationFailure.create({
          type: 'DeliveryAttemptFailed',
          message: err.message,
          nextRetryDelay: Math.min(delay, Math.max(1, settings.retryWindowMs - age)),
        });
      } finally {
        release();
      }
      await settleDelivery(pool, input.endpointId, input.eventId, 'succeeded');
      return 'succeeded';
    },

    /** The retry window passed: the delivery is failed, which the metrics and the console show. */
    async failDelivery(input: DeliveryWorkflowInput): Promise<void> {
      await settleDelivery(pool, input.endpointId, input.eventId, 'failed');
      appLog.error('webhook delivery failed: no 2xx within the retry window', { ...input });
    },
  };
}

export type DeliveryActivities = ReturnType<typeof createDeliveryActivities>;
