/**
 * The renewal's activities, each one onceflow step of the running workflow:
 * claimed in the ledger under `<workflowId>/<step name>` before it acts. The
 * workflow passes no key; a renewal's steps are named per period
 * (`charge/2026-12`), so each period is charged once.
 */
import type pg from 'pg';
import { externalStep, localStep, type Ledger } from 'onceflow';
import type { ProviderClient } from './provider-client.js';

export interface ChargeArgs {
  tenantId: string;
  subscriptionId: string;
  /** The period paid for, e.g. `2026-12`. */
  period: string;
  amount: number;
  currency: string;
}

export interface ExtendArgs {
  tenantId: string;
  subscriptionId: string;
  period: string;
  chargeId: string;
}

/** The renewal's business write: pays the subscription through `period`. */
async function extendPaidThrough(
  db: Pick<pg.PoolClient, 'query'>,
  args: ExtendArgs,
): Promise<{ paidThrough: string }> {
  const { rows } = await db.query<{ paid_through: string }>(
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
}

export function createRenewalActivities({ provider, ledger }: { provider: ProviderClient; ledger: Ledger }) {
  return {
    /** External: one charge per period at the provider, under the step's downstream key. */
    chargeRenewal: (args: ChargeArgs) =>
      externalStep(ledger, `charge/${args.period}`, {
        input: args,
        perform: ({ downstreamKey }) => provider.charge(downstreamKey, args),
        reconcile: ({ downstreamKey }) => provider.findCharge(downstreamKey),
      }),

    /** Local: the subscription's row and the step's completion commit in one transaction. */
    extendSubscription: (args: ExtendArgs) =>
      localStep(ledger, `extend/${args.period}`, { input: args, run: (tx) => extendPaidThrough(tx, args) }),
  };
}

export type RenewalActivities = ReturnType<typeof createRenewalActivities>;
