/**
 * The renewal's activities, on the library's step helpers. Each takes its
 * operation key from the workflow (derived from the workflow ID) and claims
 * it in the ledger before it acts.
 */
import type { Ledger, Scope } from 'onceflow';
import { runExternalStep, runLocalStep } from 'onceflow/activity';

/** The charge's outcome is lost: the workflow's retry reconciles it (never a new charge). */
const CHARGE_UNKNOWN = 'RenewalChargeUnknown';

export interface RenewalStep {
  tenantId: string;
  subscriptionId: string;
  period: string;
  /** The step's operation key, from stepKey(workflowId, step). */
  key: string;
}

export interface ChargeArgs extends RenewalStep {
  amount: number;
  currency: string;
}

export interface ExtendArgs extends RenewalStep {
  chargeId: string;
}

type ChargeJson = { chargeId: string };

/** Something the provider refused outright: nothing was charged, so the ledger releases the claim. */
class Refused extends Error {
  readonly definite = true;
}

function chargeOutcome(charge: { id: string }) {
  const result: ChargeJson = { chargeId: charge.id };
  return { state: 'succeeded', result, providerRef: charge.id } as const;
}

export function createRenewalActivities(deps: { ledger: Ledger; providerUrl: string }) {
  const { ledger, providerUrl } = deps;
  const scope = (args: RenewalStep, operationType: string): Scope => ({
    tenantId: args.tenantId,
    operationType,
    key: args.key,
  });

  return {
    /** External: one charge per key at the provider, under the step's downstream key. */
    async chargeRenewal(args: ChargeArgs): Promise<{ chargeId: string; reconciled: boolean }> {
      const run = await runExternalStep<ChargeJson>(
        ledger,
        scope(args, 'renewal.charge'),
        {
          schemaVersion: 1,
          value: {
            subscriptionId: args.subscriptionId,
            period: args.period,
            amount: args.amount,
            currency: args.currency,
          },
        },
        {
          async perform({ downstreamKey }) {
            const res = await fetch(`${providerUrl}/charges`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'idempotency-key': downstreamKey },
              body: JSON.stringify({ amount: args.amount, currency: args.currency }),
            });
            if (res.status >= 400 && res.status < 500) throw new Refused(`provider refused: ${res.status}`);
            if (!res.ok) throw new Error(`provider answered ${res.status}`);
            return chargeOutcome((await res.json()) as { id: string });
          },
          async reconcile({ downstreamKey }) {
            const res = await fetch(
              `${providerUrl}/charges?idempotency_key=${encodeURIComponent(downstreamKey)}`,
            );
            if (res.status === 404) return { state: 'not_found' };
            if (!res.ok) throw new Error(`provider lookup answered ${res.status}`);
            return chargeOutcome((await res.json()) as { id: string });
          },
        },
        { outcomeUnknownType: CHARGE_UNKNOWN },
      );
      return { chargeId: run.result.chargeId, reconciled: run.reconciled };
    },

    /** Local: the subscription row and the step's completion commit in one transaction. */
    async extendSubscription(args: ExtendArgs): Promise<{ paidThrough: string }> {
      const run = await runLocalStep<{ paidThrough: string }>(
        ledger,
        scope(args, 'renewal.extend'),
        {
          schemaVersion: 1,
          value: { subscriptionId: args.subscriptionId, period: args.period, chargeId: args.chargeId },
        },
        async (tx) => {
          const { rows } = await tx.query<{ paid_through: string }>(
            `update renewal_subscriptions
                set paid_through = $3, renewals = renewals + 1
              where tenant_id = $1 and id = $2
             returning paid_through`,
            [args.tenantId, args.subscriptionId, args.period],
          );
          const row = rows[0];
          // Rolls back and is retried: the subscription must exist before it renews.
          if (!row) throw new Error(`subscription ${args.subscriptionId} does not exist`);
          return { paidThrough: row.paid_through };
        },
      );
      return run.result;
    },
  };
}

export type RenewalActivities = ReturnType<typeof createRenewalActivities>;
