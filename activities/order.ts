/**
 * Order activities: thin adapters from Temporal to the ledger (src/ledger)
 * and the providers (src/providers). Each one claims its operation key in the
 * ledger before it acts; the key comes from the workflow as an argument.
 *
 * At this boundary permanent errors become non-retryable ApplicationFailures
 * and transient ones are thrown for Temporal to retry.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Pool } from '../src/db/index.ts';
import { Ledger, LedgerError } from 'onceflow';
import { heartbeatRenewal, toActivityFailure as ledgerFailure } from 'onceflow';
import type { EmailProvider, PaymentProvider } from '../src/providers/types.ts';
import { ProviderError } from '../src/providers/types.ts';
import { OPERATION_TYPES, type OrderStatus } from '../src/orders/model.ts';
import { FAILURE, type FailureType } from '../src/orders/contract.ts';
import { orderTransitionStatement } from '../src/orders/sql.ts';
import * as payment from '../src/steps/payment.ts';
import * as receipt from '../src/steps/receipt.ts';
import { childLog, errorFields, type Log } from '../src/log.ts';

export type { ChargeResult, ReconcileResult } from '../src/steps/payment.ts';

export interface OrderActivityDeps {
  pool: Pool;
  ledger: Ledger;
  payments: PaymentProvider;
  email: EmailProvider;
  /** The providers' idempotency-key window; default the ledger's (24 h). Tests shorten it. */
  providerKeyWindowMs?: number;
}

export interface StepRef {
  tenantId: string;
  orderId: string;
  workflowId: string;
  /** The step's operation key, derived from the workflow ID by the workflow. */
  key: string;
}

/**
 * A status a step writes itself, before or after it acts: the same ledger step under the same key
 * as setOrderStatus's, so the workflow can write it as its own step instead if this write fails,
 * and whichever runs second finds it written.
 */
export interface CarriedStatus {
  status: OrderStatus;
  key: string;
}

export interface ChargeArgs extends StepRef {
  amount: number;
  currency: string;
  paymentMethod: string;
  /** Written before the charge is made (payment_pending); not part of the charge's fingerprint. */
  before?: CarriedStatus;
}

export interface ReceiptArgs extends StepRef {
  to: string;
  amount: number;
  currency: string;
  chargeId: string;
  /** Written before the receipt is sent (paid), with the charge ID. */
  before?: CarriedStatus;
  /** Written once the receipt is sent (completed), with the charge and message IDs. */
  after?: CarriedStatus;
}

export interface StatusArgs extends StepRef {
  status: OrderStatus;
  chargeId?: string | null;
  receiptId?: string | null;
  /** Shown to operators; not part of the operation's fingerprint. */
  lastError?: string | null;
  /** Machine-readable reason for rejected / needs_attention (ORDER_REASONS); not fingerprinted. */
  reason?: string | null;
}

export interface StatusResult {
  applied: boolean;
  status: OrderStatus;
}

export interface SettleArgs extends StepRef {
  outcome: 'succeeded' | 'failed';
  chargeId?: string;
}

/**
 * Maps ledger and provider errors onto Temporal's retry semantics. A provider
 * refusing the request itself (nothing happened) becomes `rejectedType`,
 * non-retryable; the same refusal after a takeover (the record stays
 * unknown, so nothing is proven) becomes a non-retryable
 * FAILURE.refusedAfterTakeover, which parks the order; a request that never left
 * (connection refused, DNS) is a
 * retryable FAILURE.providerUnavailable (the claim was released, the retry starts
 * fresh under the same key). An idempotency-key conflict never gets here: the
 * ledger marks it unknown (outcome_unknown). Every other ledger error maps as
 * the library's activity helpers map it (src/lib/activity.ts, whose failure
 * types FAILURE shares).
 */
function toActivityFailure(
  err: unknown,
  unknownType: FailureType,
  rejectedType: FailureType = FAILURE.providerRejected,
): unknown {
  if (err instanceof LedgerError) {
    if (
      err.code === 'outcome_unknown' &&
      err.cause instanceof ProviderError &&
      err.cause.kind === 'rejected'
    ) {
      // Refused after a takeover: the record stays unknown (an earlier attempt may still act
      // under the key, docs/MODEL.md F1), so this is not `rejectedType` (which proves nothing
      // was charged); but the same request would be refused again, and retrying it until the
      // reconciliation horizon settles nothing. Non-retryable: the workflow parks the order.
      return ApplicationFailure.create({
        type: FAILURE.refusedAfterTakeover,
        message: err.message,
        nonRetryable: true,
        cause: err,
      });
    }
    return ledgerFailure(err, unknownType);
  }
  if (err instanceof ProviderError && err.kind === 'rejected') {
    return ApplicationFailure.create({ type: rejectedType, message: err.message, nonRetryable: true });
  }
  if (err instanceof ProviderError && err.kind === 'not_sent') {
    return ApplicationFailure.create({ type: FAILURE.providerUnavailable, message: err.message, cause: err });
  }
  return err;
}

/**
 * The step's logger: every line carries the workflow ID and the operation
 * key (plus the attempt), so one order's steps can be found by either.
 * Only identifiers: never the card, the address or the provider payload.
 */
export function stepLog(ref: StepRef): Log {
  const info = Context.current().info;
  return childLog({
    workflowId: info.workflowExecution?.workflowId ?? ref.workflowId,
    operationKey: ref.key,
    tenantId: ref.tenantId,
    orderId: ref.orderId,
    activityType: info.activityType,
    attempt: info.attempt,
  });
}

/** Logs a step that did not finish (warn: Temporal retries it, or the workflow handles it) and maps the error. */
export function failed(
  log: Log,
  err: unknown,
  unknownType: FailureType,
  rejectedType?: FailureType,
): unknown {
  const failure = toActivityFailure(err, unknownType, rejectedType);
  const type = failure instanceof ApplicationFailure ? failure.type : undefined;
  log.warn('step did not finish', { ...errorFields(err), ...(type ? { failureType: type } : {}) });
  return failure;
}

function scope(ref: StepRef, operationType: string) {
  return { tenantId: ref.tenantId, operationType, key: ref.key };
}

export function createOrderActivities(deps: OrderActivityDeps) {
  const { ledger } = deps;
  const keyWindowMs = deps.providerKeyWindowMs;
  const paymentDeps: payment.ChargeStepDeps = { ledger, payments: deps.payments, keyWindowMs };
  const receiptDeps: receipt.ReceiptStepDeps = { ledger, email: deps.email, keyWindowMs };

  /**
   * One status write: the order's transition and its ledger record in one statement (one round
   * trip, no BEGIN/COMMIT). A repeat finds the record through the statement's conflict and
   * returns it. `carried`: a status a step writes around itself (CarriedStatus). A later attempt
   * of that step is likely a repeat, so it reads the record first; and any failure becomes a
   * non-retryable FAILURE.statusNotRecorded, so the workflow writes the status as its own step,
   * with that step's retries and its parking (workflows/order.ts, recordStatus).
   */
  async function writeStatus(args: StatusArgs, carried = false): Promise<StatusResult> {
    const log = stepLog(args);
    try {
      const ran = await ledger.runLocalStatement<{ applied: boolean; status: OrderStatus }>(
        scope(args, OPERATION_TYPES.status),
        { schemaVersion: 1, value: { orderId: args.orderId, status: args.status } },
        orderTransitionStatement({
          tenantId: args.tenantId,
          orderId: args.orderId,
          to: args.status,
          chargeId: args.chargeId ?? null,
          receiptId: args.receiptId ?? null,
          lastError: args.lastError ?? null,
          reason: args.reason ?? null,
          stepKey: args.key,
          taskQueue: Context.current().info.taskQueue,
        }),
        { readFirst: carried && Context.current().info.attempt > 1 },
      );
      if (!ran) {
        throw ApplicationFailure.create({
          type: FAILURE.orderNotFound,
          message: `order ${args.tenantId}/${args.orderId} does not exist`,
          nonRetryable: true,
        });
      }
      log.info(carried ? 'status written' : 'step finished', {
        status: ran.result.status,
        applied: ran.result.applied,
      });
      return ran.result;
    } catch (err) {
      const failure = failed(log, err, FAILURE.statusOutcomeUnknown);
      if (!carried) throw failure;
      throw ApplicationFailure.create({
        type: FAILURE.statusNotRecorded,
        message: `status ${args.status} (key ${args.key}) was not recorded: ${
          failure instanceof Error ? failure.message : String(failure)
        }`,
        nonRetryable: true,
        cause: failure instanceof Error ? failure : undefined,
      });
    }
  }

  /**
   * Starts the status a step writes before it acts, to run beside the step's claim (one round trip,
   * not two): the step calls its provider only once it is written (runStep's `before`), and awaits
   * it in any case, so its failure is the step's.
   */
  function carriedBeside(args: StatusArgs | undefined): Promise<StatusResult> | undefined {
    if (!args) return undefined;
    const written = writeStatus(args, true);
    written.catch(() => undefined); // awaited by the step; this only keeps it from counting as unhandled
    return written;
  }

  /** The status a step carries, with the IDs the order has by then. */
  const carriedArgs = (
    step: StepRef,
    carried: CarriedStatus,
    ids: { chargeId: string | null; receiptId: string | null },
  ): StatusArgs => ({ ...step, ...ids, key: carried.key, status: carried.status });

  return {
    /** Charges once per key; heartbeats and renews its claim while the provider call runs. */
    async chargePayment(args: ChargeArgs): Promise<payment.ChargeResult> {
      const status = carriedBeside(
        args.before && carriedArgs(args, args.before, { chargeId: null, receiptId: null }),
      );
      const log = stepLog(args);
      try {
        const r = await payment.runCharge(paymentDeps, args, { ...heartbeatRenewal(), before: status });
        await status; // a replay calls no provider, so nothing above waited for it
        log.info('step finished', {
          outcome: r.outcome,
          chargeId: r.chargeId,
          replayed: r.replayed,
          reconciled: r.reconciled,
        });
        return r;
      } catch (err) {
        await status; // not written: this attempt charged nothing (FAILURE.statusNotRecorded)
        throw failed(log, err, FAILURE.paymentOutcomeUnknown, FAILURE.paymentRejected);
      }
    },

    /**
     * Reconciles an uncertain charge without ever performing it. `performAgain`:
     * the provider never saw the key; call chargePayment again (same key).
     */
    async reconcileCharge(args: StepRef): Promise<payment.ReconcileResult> {
      const log = stepLog(args);
      try {
        const r = await payment.reconcileCharge(paymentDeps, args);
        log.info('step finished', { settled: r.settled, outcome: r.outcome, chargeId: r.chargeId });
        return r;
      } catch (err) {
        if (err instanceof LedgerError && err.code === 'outcome_unknown') {
          log.info('step finished', { settled: false, outcome: null, stillUnknown: true });
          return { settled: false, outcome: null, chargeId: null };
        }
        throw failed(log, err, FAILURE.paymentOutcomeUnknown);
      }
    },

    /** Records a provider event or an operator's decision about an uncertain charge. */
    async settleCharge(args: SettleArgs): Promise<payment.ReconcileResult> {
      const log = stepLog(args);
      try {
        const r = await payment.settleCharge(paymentDeps, args, args.outcome, args.chargeId ?? null);
        log.info('step finished', { settled: r.settled, outcome: r.outcome, chargeId: r.chargeId });
        return r;
      } catch (err) {
        throw failed(log, err, FAILURE.paymentOutcomeUnknown);
      }
    },

    /** Sends the receipt once per key; heartbeats and renews its claim like chargePayment. */
    async sendReceipt(args: ReceiptArgs): Promise<receipt.ReceiptResult> {
      const chargeId = args.chargeId || null;
      const status = carriedBeside(
        args.before && carriedArgs(args, args.before, { chargeId, receiptId: null }),
      );
      const log = stepLog(args);
      let r: receipt.ReceiptResult;
      try {
        r = await receipt.runReceipt(receiptDeps, args, { ...heartbeatRenewal(), before: status });
        await status;
        log.info('step finished', { ...r });
      } catch (err) {
        await status;
        throw failed(log, err, FAILURE.receiptOutcomeUnknown);
      }
      if (args.after)
        await writeStatus(carriedArgs(args, args.after, { chargeId, receiptId: r.messageId }), true);
      return r;
    },

    /** A status as its own step: the status row and the ledger record in one statement. */
    setOrderStatus: (args: StatusArgs): Promise<StatusResult> => writeStatus(args),
  };
}

export type OrderActivities = ReturnType<typeof createOrderActivities>;
