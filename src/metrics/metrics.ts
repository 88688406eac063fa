/**
 * Prometheus metrics for the API and the worker. Counters are per process (sum them); backlog
 * gauges are read from Postgres at scrape time (aggregate with max(), never sum()). Label values
 * are bounded: constants, the ledger's vocabulary, route patterns (never raw URLs).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { withTransaction, type Pool } from '../db/index.ts';
import type { LedgerEvent, LedgerEventType, LedgerHooks } from 'onceflow';
import { errorFields, log } from '../log.ts';
import { countUnrecordedParked } from '../orders/sql.ts';
import { countOpenRefunds } from '../refunds/sql.ts';
import { selectOutboxBacklog, type OutboxBacklog } from '../outbox/sql.ts';
import { selectBacklog, setLocalStatementTimeout, type BacklogSnapshot } from './sql.ts';
import { selectDeliveryBacklog, type DeliveryBacklog } from '../merchant-events/sql.ts';

export interface MetricsOptions {
  /** Defaults to a fresh registry (not prom-client's global one), so tests and processes never share state. */
  registry?: Registry;
  /** Postgres for the backlog gauges; without it they are not registered. */
  pool?: Pool;
  /** Parked workflows from visibility, so needs_attention also counts those whose row write failed. */
  parkedWorkflowIds?: () => Promise<string[]>;
  /** Upper bound on one scrape's database work. Default 2 000 ms. */
  queryTimeoutMs?: number;
  /** Node process metrics (CPU, memory, event loop lag, GC). Default true. */
  defaultMetrics?: boolean;
  /** Labels added to every metric, e.g. { service: 'worker' }. */
  defaultLabels?: Record<string, string>;
}

interface HttpSample {
  /** The route pattern (`/v1/orders/:id`), never the raw URL; 'unmatched' for 404s. */
  route: string;
  method: string;
  status: number;
  durationMs: number;
}

export interface Metrics {
  registry: Registry;
  /** Pass to `new Ledger(pool, { hooks: metrics.ledgerHooks })`. */
  ledgerHooks: LedgerHooks;
  /** Records one HTTP response. Never throws. */
  observeHttp(sample: HttpSample): void;
}

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Concurrent gauge collectors of one scrape share a single query. */
const SNAPSHOT_REUSE_MS = 1_000;

/**
 * One counter per ledger event type, with the label its `outcome` fills (none: not counted). A
 * Record, so an event type added to the core does not compile here until it has its counter.
 */
const LEDGER_COUNTERS: Record<LedgerEventType, { name: string; help: string; outcome?: string }> = {
  claim: {
    name: 'onceflow_ledger_claims_total',
    help: 'Fresh claims of an operation (first attempts), by mode (local | external).',
    outcome: 'mode',
  },
  replay: {
    name: 'onceflow_ledger_replays_total',
    help: 'Duplicate hits answered from a stored outcome without running anything, by stored state.',
    outcome: 'state',
  },
  conflict: {
    name: 'onceflow_ledger_conflicts_total',
    help: 'Key reuse with a different input (fingerprint mismatch), rejected.',
  },
  in_progress: {
    name: 'onceflow_ledger_in_progress_refusals_total',
    help: 'Duplicates refused because another attempt still holds the claim.',
  },
  takeover: {
    name: 'onceflow_ledger_takeovers_total',
    help: 'Claims of an expired lease or an unknown record (always reconciled before acting), by prior state.',
    outcome: 'from_state',
  },
  unknown: {
    name: 'onceflow_ledger_unknown_outcomes_total',
    help: 'Records marked unknown (an external outcome was lost or could not be reconciled), by reason.',
    outcome: 'reason',
  },
  reconcile: {
    name: 'onceflow_ledger_reconciliations_total',
    help:
      'Reconciliations by outcome: the provider answer (succeeded, failed, not_found, pending, error) ' +
      'or settled:<state> for a webhook/operator settlement.',
    outcome: 'outcome',
  },
  ownership_lost: {
    name: 'onceflow_ledger_ownership_lost_total',
    help: 'Late attempts refused because their claim was taken over or settled (fencing worked).',
  },
  complete: {
    name: 'onceflow_ledger_completions_total',
    help: 'Operations completed by their owner, by final state.',
    outcome: 'state',
  },
  fail: {
    name: 'onceflow_ledger_aborted_total',
    help: 'Claims given up with nothing stored (rolled_back: local body threw; released: definite provider failure).',
    outcome: 'reason',
  },
};

export function createMetrics(options: MetricsOptions = {}): Metrics {
  const registry = options.registry ?? new Registry();
  if (options.defaultLabels) registry.setDefaultLabels(options.defaultLabels);
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const registers = [registry];

  const ledgerCounters = new Map(
    Object.entries(LEDGER_COUNTERS).map(([type, c]) => {
      const labelNames = c.outcome ? ['operation_type', c.outcome] : ['operation_type'];
      return [type, new Counter({ name: c.name, help: c.help, labelNames, registers })];
    }),
  );
  const ledgerHooks: LedgerHooks = {
    onEvent(e: LedgerEvent) {
      const { outcome } = LEDGER_COUNTERS[e.type];
      const labels = outcome
        ? { operation_type: e.operationType, [outcome]: e.outcome ?? 'none' }
        : { operation_type: e.operationType };
      ledgerCounters.get(e.type)?.inc(labels);
    },
  };

  const labels = ['route', 'method', 'status'] as const;
  const httpRequests = new Counter({
    name: 'http_requests_total',
    help: 'HTTP responses by route pattern, method and status code.',
    labelNames: labels,
    registers,
  });
  const httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration (request received to response sent) by route pattern, method and status.',
    labelNames: labels,
    buckets: DURATION_BUCKETS,
    registers,
  });

  if (options.pool)
    registerBacklogGauges(registry, options.pool, options.queryTimeoutMs ?? 2_000, options.parkedWorkflowIds);

  return {
    registry,
    ledgerHooks,
    observeHttp(sample) {
      try {
        const l = { route: sample.route, method: sample.method, status: String(sample.status) };
        httpRequests.inc(l);
        httpDuration.observe(l, Math.max(0, sample.durationMs) / 1000);
      } catch {
        // metrics must never break a request
      }
    },
  };
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

interface Snapshot extends BacklogSnapshot {
  outbox: OutboxBacklog;
  /** Parked workflows without a needs_attention row; null if visibility was not read. */
  parkedUnrecorded: number | null;
  refunds: Awaited<ReturnType<typeof countOpenRefunds>>;
  deliveries: DeliveryBacklog;
}

function registerBacklogGauges(
  registry: Registry,
  pool: Pool,
  timeoutMs: number,
  parkedWorkflowIds: (() => Promise<string[]>) | undefined,
): void {
  const registers = [registry];
  let cached: { at: number; promise: Promise<Snapshot | null> } | undefined;
  let visibilityUp = 0;

  /** null when the database did not answer in time: the gauges then read NaN, never a reassuring 0. */
  const snapshot = (): Promise<Snapshot | null> => {
    const now = Date.now();
    if (cached && now - cached.at < SNAPSHOT_REUSE_MS) return cached.promise;
    const promise = (async (): Promise<Snapshot | null> => {
      // Visibility first, outside the transaction: no transaction stays open across a Temporal call.
      let parked: string[] | null = null;
      if (parkedWorkflowIds) {
        parked = await withTimeout(parkedWorkflowIds(), timeoutMs, 'metrics visibility query').catch(
          (err: unknown) => {
            log.warn('metrics: parked workflow query failed', errorFields(err));
            return null;
          },
        );
        visibilityUp = parked ? 1 : 0;
      }
      return withTimeout(
        withTransaction(
          pool,
          async (tx) => {
            await setLocalStatementTimeout(tx, timeoutMs);
            const backlog = await selectBacklog(tx);
            const outbox = await selectOutboxBacklog(tx);
            return {
              ...backlog,
              outbox,
              parkedUnrecorded: parked ? await countUnrecordedParked(tx, parked) : null,
              refunds: await countOpenRefunds(tx),
              deliveries: await selectDeliveryBacklog(tx),
            };
          },
          { retries: 0 },
        ),
        timeoutMs + 500,
        'metrics backlog query',
      );
    })().catch((err: unknown) => {
      log.warn('metrics: backlog query failed', errorFields(err));
      return null;
    });
    cached = { at: now, promise };
    return promise;
  };
  const value = (n: number | null | undefined, absent = 0) => (n === undefined ? NaN : (n ?? absent));

  new Gauge({
    name: 'onceflow_metrics_db_up',
    help: '1 if the backlog gauges were read from Postgres on this scrape, 0 if the query failed or timed out.',
    registers,
    async collect() {
      this.set((await snapshot()) ? 1 : 0);
    },
  });
  new Gauge({
    name: 'onceflow_ledger_oldest_age_seconds',
    help: 'Age of the oldest ledger record in this unresolved state (0 when there is none; NaN if unreadable).',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.set({ state: 'in_progress' }, value(s?.oldestInProgressSeconds));
      this.set({ state: 'unknown' }, value(s?.oldestUnknownSeconds));
    },
  });
  new Gauge({
    name: 'onceflow_ledger_unresolved_records',
    help: 'Ledger records in_progress or unknown (the reconciliation backlog).',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.set({ state: 'in_progress' }, value(s?.inProgress));
      this.set({ state: 'unknown' }, value(s?.unknown));
    },
  });
  new Gauge({
    name: 'onceflow_orders_in_status',
    help:
      'Orders waiting on an outcome or a human: payment_unknown and needs_attention. needs_attention ' +
      'also counts parked workflows whose row could not record it (read from Temporal visibility).',
    labelNames: ['status'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.set({ status: 'payment_unknown' }, value(s?.ordersPaymentUnknown));
      this.set(
        { status: 'needs_attention' },
        s ? s.ordersNeedsAttention + (s.parkedUnrecorded ?? 0) : value(undefined),
      );
    },
  });
  new Gauge({
    name: 'onceflow_refunds_in_status',
    help:
      'Refunds waiting on an outcome or a human: pending, refund_unknown (the provider answer was lost; ' +
      'being reconciled) and needs_attention.',
    labelNames: ['status'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      for (const status of ['pending', 'refund_unknown', 'needs_attention'] as const)
        this.set({ status }, value(s?.refunds[status]));
    },
  });
  new Gauge({
    name: 'onceflow_outbox_unstarted_rows',
    help: 'Orders committed whose workflow the outbox relay has not started yet (any task queue).',
    registers,
    async collect() {
      this.set(value((await snapshot())?.outbox.unstarted));
    },
  });
  new Gauge({
    name: 'onceflow_outbox_oldest_unstarted_age_seconds',
    help: 'Age of the oldest outbox row whose workflow is not started yet (0 when there is none; NaN if unreadable).',
    registers,
    async collect() {
      this.set(value((await snapshot())?.outbox.oldestUnstartedSeconds));
    },
  });
  new Gauge({
    name: 'onceflow_webhook_deliveries_pending',
    help: 'Merchant webhook deliveries not yet answered with a 2xx and not yet failed (the delivery backlog).',
    registers,
    async collect() {
      this.set(value((await snapshot())?.deliveries.pending));
    },
  });
  new Gauge({
    name: 'onceflow_webhook_oldest_pending_age_seconds',
    help: 'Age of the oldest undelivered merchant event delivery (0 when there is none; NaN if unreadable).',
    registers,
    async collect() {
      this.set(value((await snapshot())?.deliveries.oldestPendingSeconds));
    },
  });
  new Gauge({
    name: 'onceflow_webhook_deliveries_failed',
    help: 'Deliveries that got no 2xx within the retry window, per endpoint (an operator can redeliver them).',
    labelNames: ['endpoint'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      this.reset();
      for (const f of s?.deliveries.failedByEndpoint ?? []) this.set({ endpoint: f.endpointId }, f.failed);
    },
  });
  if (parkedWorkflowIds) {
    new Gauge({
      name: 'onceflow_metrics_visibility_up',
      help:
        '1 if parked order workflows were read from Temporal visibility on this scrape; 0 if not (the ' +
        'needs_attention gauge then counts order rows only).',
      registers,
      async collect() {
        await snapshot();
        this.set(visibilityUp);
      },
    });
  }
}
