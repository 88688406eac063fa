/**
 * The operator's recovery path: look at uncertain work, reconcile it, resolve
 * an unknown outcome, re-drive a parked order. The CLI (src/cli/ops.ts) and
 * the admin routes (routes.ts) are thin shells over this class.
 *
 * Invariants
 * - Identity is kept: every action works on the original scope (tenant,
 *   operation type, key) and the original workflow. Nothing creates a new key
 *   and nothing deletes a row.
 * - Every action writes an audit row (who, what, why, before, after). Where
 *   the change is a local write (resolve), the audit row commits in the SAME
 *   transaction as the change. A reconcile's change is the ledger's own
 *   fenced completion with the provider's answer (a provider call sits in the
 *   middle, so no transaction can span it); its audit row follows at once.
 *   A re-drive calls Temporal: its intent row commits before the call and
 *   its result is a second row (docs/ARCHITECTURE.md: no transaction across
 *   a call to Temporal or a provider).
 * - Decisions need a reason: resolve and redrive refuse an empty one before
 *   touching anything.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { withClient, withTransaction, type PoolClient } from '../db/index.ts';
import {
  downstreamKey,
  isLedgerError,
  type Json,
  type OperationRecord,
  type ReconcileOutcome,
  type Scope,
} from 'onceflow';
import { OPERATION_TYPES } from '../orders/model.ts';
import {
  REFUND_KEY,
  REFUND_OPERATION_TYPES,
  refundEventSignal,
  refundRedriveUpdate,
} from '../refunds/contract.ts';
import { getRefundById } from '../refunds/sql.ts';
import type { AnyStep, Reconciler } from '../steps/descriptor.ts';
import { EXTERNAL_OPERATION_TYPES, providerOf, stepOf } from '../steps/registry.ts';
import { paymentEventSignal, redriveUpdate } from '../orders/contract.ts';
import { insertAudit, type AuditAction, type AuditEntry } from '../audit/sql.ts';
import { getOrder } from '../orders/sql.ts';
import { OpsError } from './errors.ts';
import {
  orderSummary,
  ActorOptions,
  ReconcileResult,
  ResolveResult,
  RedriveResult,
  refundSummary,
  RefundRedriveResult,
  workflowIdForKey,
  isFinal,
  message,
  requireText,
  fromLedger,
  nextStep,
  redriveError,
  auditView,
  refundView,
  orderView,
} from './views.ts';
import { OperatorReads } from './reads.ts';

export class Operator extends OperatorReads {
  /**
   * Asks the provider now (by the downstream key) and stores its answer. Never
   * performs anything. A final record, or one a live attempt holds, comes back
   * unchanged; a provider that does not know the key leaves it unknown.
   */
  async reconcileNow(scope: Scope, opts: ActorOptions & { reason?: string }): Promise<ReconcileResult> {
    const actor = requireText(opts.actor, 'actor', 200);
    const reason = opts.reason?.trim() ? requireText(opts.reason, 'reason') : null;
    const { reconcile, keyWindowMs } = await this.#reconciler(scope);
    const before = await this.record(scope);
    let after: OperationRecord;
    let error: string | undefined;
    let providerAnswer: ReconcileResult['providerAnswer'];
    let next: string | undefined;
    try {
      const r = await this.deps.ledger.reconcileUnresolved(scope, reconcile, { keyWindowMs });
      after = r.record;
      providerAnswer = r.answer;
      next = nextStep(scope, r.answer, r.performable);
    } catch (err) {
      if (!isLedgerError(err, 'outcome_unknown')) throw fromLedger(err);
      error = `provider lookup failed: ${message(err.cause ?? err)}`;
      providerAnswer = 'error';
      after = await this.record(scope);
    }
    const audit = await withClient(this.deps.pool, (c) =>
      insertAudit(c, {
        actor,
        source: opts.source ?? this.deps.source ?? 'cli',
        actorCredential: opts.actorCredential ?? 'self_declared',
        action: 'reconcile',
        reason,
        tenantId: scope.tenantId,
        operationType: scope.operationType,
        operationKey: scope.key,
        workflowId: workflowIdForKey(scope),
        before: auditView(before),
        after: {
          ...auditView(after),
          providerAnswer,
          // Stored as JSON: an undefined field is simply absent.
          reconcileError: error,
          next,
        },
      }),
    );
    // A refund's workflow reconciles on timers, or waits parked: tell it the record is settled now.
    if (
      before.state !== after.state &&
      isFinal(after.state) &&
      scope.operationType === REFUND_OPERATION_TYPES.providerRefund
    ) {
      await this.#tellRefund(scope, after.state as 'succeeded' | 'failed', audit, actor, reason ?? undefined);
    }
    return {
      before,
      after,
      changed: before.state !== after.state,
      audit,
      providerAnswer,
      error,
      next,
    };
  }

  /**
   * Settles an unknown (or abandoned in_progress) record as the operator
   * decided, with a required reason. The audit row and the ledger change
   * commit together; then the order workflow is signalled (paymentEvent,
   * source 'operator', eventId = the audit row's id) so a parked order moves
   * on. A final record is refused: a decision never overwrites an outcome.
   */
  async resolveUnknown(
    scope: Scope,
    outcome: 'succeeded' | 'failed',
    opts: ActorOptions & { reason: string; chargeId?: string; providerRef?: string },
  ): Promise<ResolveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    if (outcome !== 'succeeded' && outcome !== 'failed') {
      throw new OpsError('invalid_input', "outcome must be 'succeeded' or 'failed'");
    }
    const ref = (opts.chargeId ?? opts.providerRef)?.trim() || undefined;
    const result = this.#settledResult(scope, outcome, ref);
    const workflowId = workflowIdForKey(scope);
    await this.#refuseContradiction(scope, outcome);

    const { before, after, audit } = await withTransaction(
      this.deps.pool,
      async (tx: PoolClient) => {
        let settled;
        try {
          settled = await this.deps.ledger.settle(
            scope,
            { state: outcome, result, providerRef: ref },
            { tx },
          );
        } catch (err) {
          throw fromLedger(err);
        }
        const prior = settled.before;
        if (!prior || isFinal(prior.state)) {
          // settle() is idempotent for the same outcome; an operator decision is not: refuse, write nothing.
          throw new OpsError(
            'invalid_state',
            `operation is already ${prior?.state ?? 'settled'}; only unknown or in_progress records can be resolved`,
          );
        }
        const entry = await insertAudit(tx, {
          actor,
          source: opts.source ?? this.deps.source ?? 'cli',
          actorCredential: opts.actorCredential ?? 'self_declared',
          action: 'resolve',
          reason,
          tenantId: scope.tenantId,
          operationType: scope.operationType,
          operationKey: scope.key,
          workflowId,
          before: auditView(prior),
          after: auditView(settled.record),
        });
        return { before: prior, after: settled.record, audit: entry };
      },
      { retries: 0 },
    );

    let signalled = false;
    let signalError: string | undefined;
    if (workflowId && scope.operationType === REFUND_OPERATION_TYPES.providerRefund) {
      ({ signalled, signalError } = await this.#tellRefund(scope, outcome, audit, actor, reason));
    } else if (workflowId && scope.operationType === OPERATION_TYPES.charge) {
      try {
        await this.withTemporal(() =>
          this.deps.temporal.workflow.getHandle(workflowId).signal(paymentEventSignal, {
            source: 'operator',
            outcome,
            eventId: `audit:${audit.id}`,
            reason,
            actor,
            chargeId: ref,
          }),
        );
        signalled = true;
      } catch (err) {
        signalError =
          err instanceof WorkflowNotFoundError
            ? 'the order workflow is not running (finished or never started)'
            : message(err);
      }
    }
    return {
      before,
      after,
      changed: true,
      audit,
      workflowId,
      signalled,
      signalError,
    };
  }

  /**
   * Re-drives a parked order: its workflow picks up where it stopped, under
   * the same keys (an uncertain charge is reconciled again, never re-charged
   * under a new key). The re-drive is a Temporal Update whose validator
   * refuses it unless the workflow is parked (waiting for an operator), so a
   * re-drive is never silently dropped; whether the order row says
   * needs_attention does not matter (a workflow that could not even record
   * needs_attention is parked all the same).
   *
   * No transaction or row lock is held across the Temporal call
   * (docs/ARCHITECTURE.md): the intent (`redrive_requested`) commits first,
   * then the update is sent with a deadline, then its result is a second
   * audit row: `redrive` (taken), `redrive_refused` (the workflow refused it
   * or is not running: nothing ran), or `redrive_unknown` (no answer in
   * time: it may still run, so it is never written off as refused). Two
   * operators re-driving at once are ordered by the workflow itself: the
   * second finds it no longer parked and is refused.
   */
  async redrive(
    tenantId: string,
    orderId: string,
    opts: ActorOptions & { reason: string },
  ): Promise<RedriveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    requireText(tenantId, 'tenant', 200);
    requireText(orderId, 'order ID', 200);
    const row = await withClient(this.deps.pool, (c) => getOrder(c, tenantId, orderId));
    if (!row) throw new OpsError('not_found', `no order ${orderId} for tenant ${tenantId}`);
    const order = orderSummary(row);
    const { audit, intent, accepted } = await this.#redriveWorkflow({
      tenantId,
      workflowId: order.workflowId,
      what: 'order',
      rowStatus: order.status,
      view: orderView(order),
      opts: { ...opts, actor, reason },
      send: (handle) => handle.executeUpdate(redriveUpdate, { args: [{ actor, reason }] }),
    });
    return { order, workflowId: order.workflowId, audit, intent, accepted };
  }

  /**
   * Re-drives a parked refund (`refund/<tenant>/<refundId>`), exactly as an
   * order is re-driven: the intent row, the `redrive` update (refused unless
   * the refund workflow waits for an operator), the result row. The workflow
   * resumes under the same keys: an uncertain provider refund is reconciled
   * by its key, and made again only if the provider never saw it.
   */
  async redriveRefund(
    tenantId: string,
    refundId: string,
    opts: ActorOptions & { reason: string },
  ): Promise<RefundRedriveResult> {
    const reason = requireText(opts.reason, 'reason');
    const actor = requireText(opts.actor, 'actor', 200);
    requireText(tenantId, 'tenant', 200);
    requireText(refundId, 'refund ID', 200);
    const row = await withClient(this.deps.pool, (c) => getRefundById(c, tenantId, refundId));
    if (!row) throw new OpsError('not_found', `no refund ${refundId} for tenant ${tenantId}`);
    const refund = refundSummary(row);
    const { audit, intent, accepted } = await this.#redriveWorkflow({
      tenantId,
      workflowId: refund.workflowId,
      what: 'refund',
      rowStatus: refund.status,
      view: refundView(refund),
      opts: { ...opts, actor, reason },
      send: (handle) => handle.executeUpdate(refundRedriveUpdate, { args: [{ actor, reason }] }),
    });
    return { refund, workflowId: refund.workflowId, audit, intent, accepted };
  }

  /**
   * The re-drive's audit trail around one Temporal update (see redrive): the
   * intent row commits first, the update is sent with a deadline, its result
   * is a second row.
   */
  async #redriveWorkflow<A>(r: {
    tenantId: string;
    workflowId: string;
    what: 'order' | 'refund';
    rowStatus: string;
    view: { [k: string]: Json };
    opts: ActorOptions & { reason: string };
    send: (handle: ReturnType<Client['workflow']['getHandle']>) => Promise<A>;
  }): Promise<{ audit: AuditEntry; intent: AuditEntry; accepted: A }> {
    const { actor, reason } = r.opts;
    const source = r.opts.source ?? this.deps.source ?? 'cli';
    const entry = (action: AuditAction, after: { [k: string]: Json }) =>
      withClient(this.deps.pool, (c) =>
        insertAudit(c, {
          actor,
          source,
          actorCredential: r.opts.actorCredential ?? 'self_declared',
          action,
          reason,
          tenantId: r.tenantId,
          operationType: null,
          operationKey: null,
          workflowId: r.workflowId,
          before: r.view,
          after: { ...r.view, ...after },
        }),
      );
    // The row itself moves when the workflow resumes; what this action changes is the workflow.
    const intent = await entry('redrive_requested', {
      redrive: { update: 'redrive', workflowId: r.workflowId },
    });
    const result = (action: AuditAction, outcome: string, more: { [k: string]: Json } = {}) =>
      entry(action, { redrive: { requestId: intent.id, outcome, ...more } });

    let accepted: A;
    try {
      accepted = await this.withTemporal(() => r.send(this.deps.temporal.workflow.getHandle(r.workflowId)));
    } catch (err) {
      const opsErr = redriveError(err, r.what, r.rowStatus, intent.id);
      const refused = opsErr.code === 'invalid_state';
      // Best effort: the intent row already says the re-drive was asked for.
      await result(refused ? 'redrive_refused' : 'redrive_unknown', refused ? 'refused' : 'unknown', {
        error: opsErr.message,
      }).catch(() => undefined);
      throw opsErr;
    }
    let audit: AuditEntry;
    try {
      audit = await result('redrive', 'accepted', { accepted: accepted as unknown as Json });
    } catch (err) {
      throw new OpsError(
        'unavailable',
        `the workflow took the re-drive, but its result could not be recorded (intent: audit ${intent.id}): ${message(err)}`,
        { cause: err },
      );
    }
    return { audit, intent, accepted };
  }

  /**
   * Tells a refund's workflow that its provider refund's record is settled
   * (refundEvent, a wake-up: the workflow reads the outcome from the ledger).
   * After the ledger change committed; a failure here leaves that change
   * standing and is reported, never thrown.
   */
  async #tellRefund(
    scope: Scope,
    outcome: 'succeeded' | 'failed',
    audit: AuditEntry,
    actor: string,
    reason: string | undefined,
  ): Promise<{ signalled: boolean; signalError?: string }> {
    const workflowId = workflowIdForKey(scope);
    if (!workflowId) return { signalled: false };
    try {
      await this.withTemporal(() =>
        this.deps.temporal.workflow.getHandle(workflowId).signal(refundEventSignal, {
          source: 'operator',
          outcome,
          eventId: `audit:${audit.id}`,
          actor,
          ...(reason ? { reason } : {}),
        }),
      );
      return { signalled: true };
    } catch (err) {
      return {
        signalled: false,
        signalError:
          err instanceof WorkflowNotFoundError
            ? 'the refund workflow is not running (finished or never started)'
            : message(err),
      };
    }
  }

  // ------------------------------------------------------------------ helpers

  /**
   * An operator's decision may not contradict what the provider can still
   * tell us: resolving a charge as failed that the provider shows as
   * succeeded would invite charging again, and resolving it as succeeded
   * with no charge at the provider would ship unpaid goods. If the provider
   * cannot be asked (the usual reason an operator resolves by hand), the
   * decision stands on the operator's word and reason.
   */
  async #refuseContradiction(scope: Scope, outcome: 'succeeded' | 'failed'): Promise<void> {
    if (!stepOf(scope.operationType)) return;
    let provider: ReconcileOutcome<Json>;
    try {
      provider = await (await this.#reconciler(scope)).reconcile({ downstreamKey: downstreamKey(scope) });
    } catch {
      return;
    }
    if ((provider.state === 'succeeded' || provider.state === 'failed') && provider.state !== outcome) {
      throw new OpsError(
        'invalid_state',
        `the provider reports this operation ${provider.state}${provider.providerRef ? ` (${provider.providerRef})` : ''}; ` +
          `run reconcile instead of resolving it as ${outcome}`,
      );
    }
    if (provider.state === 'not_found' && outcome === 'succeeded') {
      throw new OpsError(
        'invalid_state',
        "the provider has no record under this operation's key; it cannot be resolved as succeeded",
      );
    }
  }

  /** The external step an operation type names; `what` says why another type is refused. */
  #step(operationType: string, what: string): AnyStep {
    const step = stepOf(operationType);
    if (!step) {
      throw new OpsError(
        'invalid_input',
        `operation type ${operationType} ${what} (only ${EXTERNAL_OPERATION_TYPES.join(', ')})`,
      );
    }
    return step;
  }

  /** The lookup that reconciles an operation, by the downstream key (the steps' own), and its key window. */
  async #reconciler(scope: Scope): Promise<{ reconcile: Reconciler<Json>; keyWindowMs: number | undefined }> {
    const step = this.#step(scope.operationType, 'has no provider to reconcile with');
    const provider = providerOf(step, this.deps);
    const keyWindowMs = step.keyWindowMs(provider, this.deps.providerKeyWindowMs);
    // A provider that lists refunds per charge (Stripe, after its key window) needs the order's charge.
    const chargeId =
      step.operationType === REFUND_OPERATION_TYPES.providerRefund
        ? await this.#refundChargeId(scope)
        : undefined;
    const ref = { tenantId: scope.tenantId, key: scope.key, chargeId };
    return { reconcile: step.reconciler(provider, ref, { keyWindowMs }), keyWindowMs };
  }

  /** The charge a refund step refunds (its order's), or undefined when the key names no known refund. */
  async #refundChargeId(scope: Scope): Promise<string | undefined> {
    const m = REFUND_KEY.exec(scope.key);
    if (!m) return undefined;
    return withClient(this.deps.pool, async (c) => {
      const refund = await getRefundById(c, scope.tenantId, m[2]!);
      if (!refund) return undefined;
      return (await getOrder(c, scope.tenantId, refund.order_id))?.charge_id ?? undefined;
    });
  }

  /**
   * What a resolved record stores: the shape the step itself stores, so its
   * later settlement of the same outcome is an idempotent no-op, not a conflict.
   */
  #settledResult(scope: Scope, outcome: 'succeeded' | 'failed', ref: string | undefined): Json {
    const step = this.#step(scope.operationType, 'is not resolved by hand');
    if (!step.resolvable.outcomes.includes(outcome)) {
      throw new OpsError(
        'invalid_input',
        step.resolvable.otherwise ?? `a ${step.name} cannot be resolved as ${outcome}`,
      );
    }
    return step.settled(outcome, ref ?? null);
  }
}
