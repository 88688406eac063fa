/**
 * An order stack for one test file: its own sandbox account on a free port,
 * an in-process worker on its own task queue (real Temporal, real Postgres),
 * and helpers to start orders and read the sandbox's audit.
 */
import { orderStartSearchAttributes } from '../../src/orders/contract.ts';
import { Worker, type NativeConnection } from '@temporalio/worker';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { createWorker } from '../../src/worker/worker.ts';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import type { OrderActivities } from '../../activities/order.ts';
import { Ledger, type LedgerHooks } from 'onceflow';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { testProviders } from './providers.ts';
import { startSandbox, type RunningSandbox } from '../../dev/sandbox/server.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { orderWorkflowId, type OrderWorkflowInput } from '../../src/orders/model.ts';
import type { OrderTiming } from '../../workflows/policies.ts';
import type { Pool } from '../../src/db/index.ts';
import { nativeConnection, temporalClient, testPool, uniq, workflowBundlePath } from './env.ts';
import type { orderWorkflow } from '../../workflows/order.ts';
import type { DeploymentVersion } from '../../src/worker/deployment.ts';

/** Short timeouts so fault tests finish in seconds. Lease > start-to-close > provider timeout. */
export const TEST_TIMING: Partial<OrderTiming> = {
  activityStartToCloseMs: 4_000,
  chargeMaxAttempts: 4,
  stepMaxAttempts: 6,
  retryInitialMs: 200,
  retryMaxMs: 1_000,
  reconcileInitialMs: 300,
  reconcileMaxMs: 1_000,
  unknownHorizonMs: 4_000,
};
export const TEST_PROVIDER_TIMEOUT_MS = 1_500;
const TEST_LEASE_MS = 6_000;

interface AuditCharge {
  id: string;
  status: 'succeeded' | 'failed';
  idempotency_key: string;
  order_id: string | null;
  [k: string]: unknown;
}

export interface OrderStack {
  taskQueue: string;
  pool: Pool;
  ledger: Ledger;
  client: Client;
  sandbox: RunningSandbox;
  /**
   * The environment a worker process of its own needs to use this stack's providers: with
   * EMAIL_PROVIDER=smtp, the local SMTP server's URL (the Stripe adapter finds the sandbox's
   * Stripe surface through SANDBOX_URL by itself).
   */
  providerEnv: Record<string, string>;
  startOrder(
    overrides?: Partial<OrderWorkflowInput>,
    timing?: Partial<OrderTiming>,
  ): Promise<{ input: OrderWorkflowInput; workflowId: string; handle: WorkflowHandle<typeof orderWorkflow> }>;
  insertOrder(
    overrides?: Partial<OrderWorkflowInput>,
  ): Promise<{ input: OrderWorkflowInput; workflowId: string }>;
  fault(endpoint: string, kind: string, count: number, delayMs?: number): Promise<void>;
  clearFaults(): Promise<void>;
  charges(orderId?: string): Promise<AuditCharge[]>;
  messages(orderId?: string): Promise<AuditCharge[]>;
  orderRow(
    input: OrderWorkflowInput,
  ): Promise<{ status: string; charge_id: string | null; last_error: string | null; reason: string | null }>;
  startWorker(): Promise<void>;
  stopWorker(): Promise<void>;
  /**
   * One more worker on this stack's task queue, beside (or instead of) the one startWorker
   * runs: polling as a Deployment Version (src/worker/deployment.ts) and running the given
   * bundle (a test-only variant of the workflows), under an identity of its own.
   */
  startVersionedWorker(opts: {
    deployment: DeploymentVersion;
    workflowBundlePath: string;
    identity: string;
  }): Promise<{ stop(): Promise<void> }>;
  close(): Promise<void>;
}

export async function startOrderStack(
  opts: {
    startWorker?: boolean;
    hooks?: LedgerHooks;
    providerTimeoutMs?: number;
    /** How long the sandbox remembers idempotency keys (its default is 24 h). */
    sandboxKeyRetentionMs?: number;
    /** Replaces some of the worker's activities (each given the real set to delegate to). */
    wrapActivities?: (real: OrderActivities, deps: ActivityDeps) => Partial<OrderActivities>;
    /** The worker's merchant webhook settings (activities/delivery.ts). */
    webhooks?: ActivityDeps['webhooks'];
  } = {},
): Promise<OrderStack> {
  const pool = testPool(20);
  const ledger = new Ledger(pool, { leaseMs: TEST_LEASE_MS, ...(opts.hooks ? { hooks: opts.hooks } : {}) });
  const sandbox = await startSandbox({
    pool,
    port: 0,
    account: uniq('acct'),
    webhook: { url: undefined, secret: 'whsec_test' },
    ...(opts.sandboxKeyRetentionMs !== undefined ? { keyRetentionMs: opts.sandboxKeyRetentionMs } : {}),
  });
  const { client, close: closeClient } = await temporalClient();
  const taskQueue = uniq('orders');
  let connection: NativeConnection | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;

  const providerOptions = {
    baseUrl: sandbox.url,
    timeoutMs: opts.providerTimeoutMs ?? TEST_PROVIDER_TIMEOUT_MS,
  };
  // PAYMENT_PROVIDER=stripe / EMAIL_PROVIDER=smtp run the same tests through the real adapters
  // (the sandbox's Stripe surface, a local SMTP server): test/support/providers.ts.
  const real = await testProviders({
    sandboxUrl: sandbox.url,
    timeoutMs: providerOptions.timeoutMs,
    keyWindowMs: opts.sandboxKeyRetentionMs,
  });
  const activityDeps = (): ActivityDeps => ({
    pool,
    ledger,
    payments: real.payments ?? createSandboxPaymentProvider(providerOptions),
    email: real.email ?? createSandboxEmailProvider(providerOptions),
    ...(opts.webhooks ? { webhooks: opts.webhooks } : {}),
  });
  const stack: OrderStack = {
    taskQueue,
    pool,
    ledger,
    client,
    sandbox,
    providerEnv: real.mail ? { SMTP_URL: real.mail.smtpUrl } : {},
    async insertOrder(overrides = {}) {
      const orderId = overrides.orderId ?? uniq('ord');
      const input: OrderWorkflowInput = {
        tenantId: 'acme',
        orderId,
        amount: 3000,
        currency: 'usd',
        paymentMethod: 'pm_card_visa',
        customer: { id: 'cus_1', email: 'buyer@example.com' },
        ...overrides,
      };
      const workflowId = orderWorkflowId(input.tenantId, input.orderId);
      await insertAcceptedOrder(pool, {
        tenantId: input.tenantId,
        orderId: input.orderId,
        workflowId,
        amount: input.amount,
        currency: input.currency,
        customerId: input.customer.id,
        customerEmail: input.customer.email,
        items: [{ sku: 'SKU-1', quantity: 2, unitAmount: input.amount / 2 }],
        paymentMethod: input.paymentMethod,
      });
      return { input, workflowId };
    },
    async startOrder(overrides = {}, timing = TEST_TIMING) {
      const { input, workflowId } = await stack.insertOrder(overrides);
      // Started as the outbox relay starts it: tenant and first status already indexed.
      const handle = await client.workflow.start<typeof orderWorkflow>('orderWorkflow', {
        taskQueue,
        workflowId,
        args: [{ ...input, timing }],
        typedSearchAttributes: orderStartSearchAttributes(input.tenantId),
      });
      return { input, workflowId, handle };
    },
    async fault(endpoint, kind, count, delayMs) {
      if (real.mail && endpoint.startsWith('messages.')) return real.mailFault(kind, count, delayMs);
      const res = await fetch(`${sandbox.url}/_sandbox/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ endpoint, kind, count, ...(delayMs !== undefined ? { delayMs } : {}) }),
      });
      if (!res.ok) throw new Error(`setting fault failed: ${res.status} ${await res.text()}`);
    },
    async clearFaults() {
      real.mail?.clearFaults();
      const res = await fetch(`${sandbox.url}/_sandbox/faults`, { method: 'DELETE' });
      if (!res.ok) throw new Error(`clearing faults failed: ${res.status}`);
    },
    async charges(orderId) {
      return audit(`${sandbox.url}/_sandbox/charges`, orderId);
    },
    async messages(orderId) {
      if (real.mail) return real.receipts(orderId);
      return audit(`${sandbox.url}/_sandbox/messages`, orderId);
    },
    async orderRow(input) {
      const { rows } = await pool.query(
        'select status, charge_id, last_error, reason from orders where tenant_id = $1 and id = $2',
        [input.tenantId, input.orderId],
      );
      if (!rows[0]) throw new Error(`order ${input.orderId} not found`);
      return rows[0];
    },
    async startWorker() {
      connection ??= await nativeConnection();
      const deps = activityDeps();
      const wrap = opts.wrapActivities;
      worker = await createWorker({
        connection,
        namespace: 'default',
        taskQueue,
        workflowBundlePath: workflowBundlePath(),
        smoke: true,
        deps,
        overrides: {
          shutdownGraceTime: '2 seconds',
          ...(wrap
            ? {
                activities: (() => {
                  const real = createActivities(deps, { smoke: true });
                  return { ...real, ...wrap(real, deps) };
                })(),
              }
            : {}),
        },
      });
      running = worker.run();
    },
    async startVersionedWorker({ deployment, workflowBundlePath: bundle, identity }) {
      connection ??= await nativeConnection();
      const versioned = await createWorker({
        connection,
        namespace: 'default',
        taskQueue,
        workflowBundlePath: bundle,
        smoke: true,
        deps: activityDeps(),
        deployment,
        overrides: { shutdownGraceTime: '2 seconds', identity },
      });
      const run = versioned.run();
      return {
        async stop() {
          if (versioned.getState() === 'RUNNING') versioned.shutdown();
          await run;
        },
      };
    },
    async stopWorker() {
      if (worker && worker.getState() === 'RUNNING') worker.shutdown();
      await running;
      worker = undefined;
      running = undefined;
    },
    async close() {
      await stack.stopWorker();
      await connection?.close();
      await closeClient();
      await sandbox.close();
      await real.close();
      await pool.end();
    },
  };
  if (opts.startWorker !== false) await stack.startWorker();
  return stack;
}

async function audit(url: string, orderId?: string): Promise<AuditCharge[]> {
  const res = await fetch(orderId ? `${url}?order_id=${encodeURIComponent(orderId)}` : url);
  if (!res.ok) throw new Error(`audit ${url} failed: ${res.status}`);
  const body = (await res.json()) as { data?: AuditCharge[] } | AuditCharge[];
  return Array.isArray(body) ? body : (body.data ?? []);
}
