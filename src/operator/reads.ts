/** The operator's read-only views (src/operator/operator.ts has the actions). */
import { withClient } from '../db/index.ts';
import { downstreamKey, type OperationRecord, type Scope } from 'onceflow';
import { ORDER_REASONS, OPERATION_TYPES, stepKeys } from '../orders/model.ts';
import { listParkedWorkflows, type ParkedWorkflow } from '../orders/attention.ts';
import { readOrderStepRecords } from '../orders/step-records.ts';
import { refundStepKeys } from '../refunds/contract.ts';
import { selectRefundsNeedingAttention } from '../refunds/sql.ts';
import type { ProviderCapabilities } from '../providers/types.ts';
import { keyWindowLeftMs, previewRedrive, type RedrivePreview } from './preview.ts';
import { providerOf, stepOf } from '../steps/registry.ts';
import { selectAudit, type AuditEntry, type AuditFilter } from '../audit/sql.ts';
import {
  getOrder,
  selectOrderByWorkflowId,
  selectOrdersByWorkflowIds,
  selectOrdersInStatus,
} from '../orders/sql.ts';
import { OpsError } from './errors.ts';
import {
  OrderConsoleView,
  orderSummary,
  refundSummary,
  OperatorDeps,
  ListOperationsFilter,
  OperationListItem,
  ProviderView,
  OperationStory,
  AttentionItem,
  RefundAttentionItem,
  AttentionList,
  workflowIdForKey,
  isRefundScope,
  message,
  fromLedger,
  orderFromWorkflow,
  clampLimit,
} from './views.ts';

/**
 * The operator's reads: nothing here changes a record. Operator (operator.ts) adds the actions.
 */
export class OperatorReads {
  protected readonly deps: OperatorDeps;

  constructor(deps: OperatorDeps) {
    this.deps = deps;
  }

  temporalUiUrl(workflowId: string): string {
    const { url, namespace } = this.deps.temporalUi;
    return `${url.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  }

  async listOperations(filter: ListOperationsFilter = {}): Promise<OperationListItem[]> {
    // Capped at ten years: beyond that Postgres' interval arithmetic overflows.
    if (
      filter.olderThanSeconds !== undefined &&
      !(filter.olderThanSeconds >= 0 && filter.olderThanSeconds <= 315_360_000)
    ) {
      throw new OpsError('invalid_input', 'olderThanSeconds must be between 0 and 315360000 (ten years)');
    }
    const records = await this.ledgerCall(() =>
      this.deps.ledger.list({
        // An empty filter value means "any", as an absent one does.
        state: filter.state || undefined,
        operationType: filter.operationType || undefined,
        tenantId: filter.tenantId || undefined,
        keyPrefix: filter.keyPrefix || undefined,
        olderThanMs: filter.olderThanSeconds === undefined ? undefined : filter.olderThanSeconds * 1000,
        limit: filter.limit ?? 100,
      }),
    );
    const now = Date.now();
    return records.map((r) => ({
      ...r,
      ageSeconds: Math.max(0, Math.round((now - r.createdAt.getTime()) / 1000)),
      workflowId: workflowIdForKey(r),
    }));
  }

  /** One operation's whole story: record, provider's view by downstream key, workflow, order, audit. */
  async showOperation(scope: Scope): Promise<OperationStory> {
    const record = await this.record(scope);
    const external = stepOf(scope.operationType) !== undefined;
    const dk = record.downstreamKey ?? (external ? downstreamKey(scope) : null);
    const workflowId = workflowIdForKey(scope);
    const [provider, order, audit] = await Promise.all([
      this.#providerView(scope.operationType, dk),
      workflowId && !isRefundScope(scope)
        ? withClient(this.deps.pool, async (c) => {
            const row = await selectOrderByWorkflowId(c, workflowId);
            return row ? orderSummary(row) : null;
          })
        : null,
      withClient(this.deps.pool, (c) =>
        selectAudit(c, { tenantId: scope.tenantId, operationKey: scope.key, limit: 50 }),
      ),
    ]);
    return {
      record,
      downstreamKey: dk,
      provider,
      workflowId,
      temporalUiUrl: workflowId ? this.temporalUiUrl(workflowId) : null,
      order,
      audit: audit.filter((a) => a.operationType === scope.operationType),
    };
  }

  /**
   * Orders parked for a human (retries ran out, or an outcome stayed
   * unknown), oldest first: the orders in needs_attention, plus the running
   * workflows that Temporal visibility shows parked although their row says
   * otherwise (a status write ran out of retries; see src/orders/attention.ts).
   */
  async listAttention(opts: { tenantId?: string; limit?: number } = {}): Promise<AttentionItem[]> {
    return (await this.listAttentionDetailed(opts)).items;
  }

  async listAttentionDetailed(opts: { tenantId?: string; limit?: number } = {}): Promise<AttentionList> {
    const limit = clampLimit(opts.limit);
    const tenantId = opts.tenantId || undefined;
    const [orders, parked] = await Promise.all([
      withClient(this.deps.pool, async (c) =>
        (await selectOrdersInStatus(c, 'needs_attention', { tenantId, limit })).map(orderSummary),
      ),
      this.withTemporal(() => listParkedWorkflows(this.deps.temporal, { tenantId, limit })).then(
        (list): { list: ParkedWorkflow[]; error?: string } => ({ list }),
        (err: unknown) => ({ list: [], error: message(err) }),
      ),
    ]);
    const items: AttentionItem[] = orders.map((o) => ({
      ...o,
      source: 'order_row',
      temporalUiUrl: this.temporalUiUrl(o.workflowId),
    }));
    const listed = new Set(orders.map((o) => o.workflowId));
    const extra = parked.list.filter((p) => !listed.has(p.workflowId));
    if (extra.length > 0) {
      const rows = await withClient(this.deps.pool, async (c) =>
        (
          await selectOrdersByWorkflowIds(
            c,
            extra.map((p) => p.workflowId),
          )
        ).map(orderSummary),
      );
      const byId = new Map(rows.map((r) => [r.workflowId, r]));
      for (const p of extra) {
        const row = byId.get(p.workflowId);
        if (row?.status === 'needs_attention') continue; // recorded since the first query
        items.push({
          ...(row ?? orderFromWorkflow(p)),
          // The workflow parked without recording it: its search attributes hold the why.
          lastError: p.lastError ?? row?.lastError ?? null,
          reason: ORDER_REASONS.statusWriteFailed,
          source: 'workflow',
          temporalUiUrl: this.temporalUiUrl(p.workflowId),
        });
      }
    }
    items.sort((a, b) => a.updatedAt.getTime() - b.updatedAt.getTime());
    return {
      items: items.slice(0, limit),
      visibilityError: parked.error ? `Temporal visibility unavailable: ${parked.error}` : undefined,
    };
  }

  /**
   * Refunds waiting on an outcome or a human (refund_unknown: its provider
   * answer was lost and it is being reconciled; needs_attention: parked),
   * oldest first, with a link to each refund's workflow.
   */
  async listRefundAttention(
    opts: { tenantId?: string; limit?: number } = {},
  ): Promise<RefundAttentionItem[]> {
    const limit = clampLimit(opts.limit);
    const rows = await withClient(this.deps.pool, (c) =>
      selectRefundsNeedingAttention(c, { tenantId: opts.tenantId || undefined, limit }),
    );
    return rows.map((r) => {
      const { providerRefundId: _, ...summary } = refundSummary(r);
      return {
        kind: 'refund' as const,
        ...summary,
        temporalUiUrl: this.temporalUiUrl(r.workflow_id),
        operationKey: refundStepKeys.refund(r.workflow_id),
      };
    });
  }

  /** Newest first. */
  async auditLog(opts: Partial<AuditFilter> = {}): Promise<AuditEntry[]> {
    return withClient(this.deps.pool, (c) =>
      selectAudit(c, {
        operationKey: opts.operationKey || undefined,
        tenantId: opts.tenantId || undefined,
        workflowId: opts.workflowId || undefined,
        actor: opts.actor || undefined,
        action: opts.action || undefined,
        text: opts.text || undefined,
        limit: clampLimit(opts.limit),
      }),
    );
  }

  /**
   * One order as the console shows it: the order, every ledger record of its
   * steps (status writes of each re-drive epoch included), oldest first,
   * each provider step with the part of its provider's key window left, and
   * the link to its history in the Temporal UI.
   */
  async orderView(tenantId: string, orderId: string, now = new Date()): Promise<OrderConsoleView> {
    const row = await withClient(this.deps.pool, (c) => getOrder(c, tenantId, orderId));
    if (!row) throw new OpsError('not_found', `no order ${orderId} for tenant ${tenantId}`);
    const order = orderSummary(row);
    const records = await this.ledgerCall(() =>
      readOrderStepRecords(this.deps.ledger, tenantId, order.workflowId),
    );
    const caps = this.#capabilities();
    return {
      order,
      temporalUiUrl: this.temporalUiUrl(order.workflowId),
      steps: records.map(({ ownerToken: _omit, ...r }) => {
        const capabilities = caps[r.operationType];
        return {
          ...r,
          keyWindowLeftMs: capabilities ? keyWindowLeftMs(capabilities, r, now) : null,
        };
      }),
    };
  }

  /** What re-driving this order would do to each provider step (src/operator/preview.ts). */
  async redrivePreview(tenantId: string, orderId: string, now = new Date()): Promise<RedrivePreview> {
    const view = await this.orderView(tenantId, orderId, now);
    const caps = this.#capabilities();
    const { workflowId } = view.order;
    const byKey = new Map(view.steps.map((s) => [`${s.operationType}\n${s.key}`, s]));
    const step = (name: string, operationType: string, key: string) => {
      const found = byKey.get(`${operationType}\n${key}`);
      return {
        name,
        operationType,
        key,
        record: found ? { ...found, ownerToken: null } : undefined,
        capabilities: caps[operationType]!,
      };
    };
    return previewRedrive(
      [
        step('charge', OPERATION_TYPES.charge, stepKeys.charge(workflowId)),
        step('receipt', OPERATION_TYPES.receipt, stepKeys.receipt(workflowId)),
      ],
      now,
    );
  }

  /** The key windows the providers declare, by the operation type of the step that calls them. */
  #capabilities(): Record<string, ProviderCapabilities> {
    const window = this.deps.providerKeyWindowMs;
    const withWindow = (c: ProviderCapabilities): ProviderCapabilities =>
      window === undefined || c.keyWindowMs === null ? c : { ...c, keyWindowMs: window };
    return {
      [OPERATION_TYPES.charge]: withWindow(this.deps.payments.capabilities),
      [OPERATION_TYPES.receipt]: withWindow(this.deps.email.capabilities),
    };
  }

  async #providerView(operationType: string, dk: string | null): Promise<ProviderView> {
    const step = stepOf(operationType);
    if (!step || !dk) return { provider: null, lookedUpBy: null, found: false, object: null };
    try {
      const object = await step.find(providerOf(step, this.deps), dk);
      return { provider: step.provider, lookedUpBy: dk, found: object !== null, object };
    } catch (err) {
      return { provider: step.provider, lookedUpBy: dk, found: false, object: null, error: message(err) };
    }
  }

  protected async record(scope: Scope): Promise<OperationRecord> {
    const record = await this.ledgerCall(() => this.deps.ledger.get(scope));
    if (!record) {
      throw new OpsError(
        'not_found',
        `no operation (tenant ${scope.tenantId}, type ${scope.operationType}, key ${scope.key})`,
      );
    }
    return record;
  }

  protected async ledgerCall<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw fromLedger(err);
    }
  }

  protected withTemporal<T>(fn: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + (this.deps.temporalTimeoutMs ?? 10_000);
    return this.deps.temporal.withDeadline(deadline, fn);
  }
}
