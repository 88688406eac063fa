/**
 * The peer of issue 29, for `npm run bench:peer` (bench/peer.ts): the same
 * order as onceflow's, as a DBOS Transact workflow, so both systems run in
 * the same run on the same machine. Bench-only; a child process of
 * bench/peer.ts, which forks it with an IPC channel.
 *
 * DBOS runs in the application's process and keeps its workflows in
 * Postgres (the `dbos` schema of the peer's database): no orchestrator, no
 * HTTP API. So this process is the application and its own load generator,
 * as in the comparison. The order's six steps, each a DBOS step
 * (checkpointed in the system database once it returns, retried by DBOS):
 *   accepted (insert) -> payment_pending -> charge -> paid -> receipt -> completed
 * The charge and the receipt go to a sandbox provider (its own process, on
 * the peer's database, webhook delivery off: the peer has no API to receive
 * it) through onceflow's own provider clients, with the step's key
 * (`<workflowId>/charge`, `/receipt`) as the provider's idempotency key. The
 * status steps are one UPDATE each on the peer's own orders table. The
 * workflow ID is the order's ID, so a repeated start is the same workflow.
 *
 * Environment: PEER_DATABASE_URL, SANDBOX_URL, PEER_SYSTEM_POOL (DBOS's pool size). Messages from the parent:
 * `{ type: 'run', count, concurrency, first }`, answered with
 * `{ type: 'done', secs, latenciesMs, notCompleted }`; `{ type: 'stop' }`.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import { createPool } from '../../src/db/index.ts';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { closedLoop } from '../lib/stack.ts';

const databaseUrl = process.env.PEER_DATABASE_URL;
const sandboxUrl = process.env.SANDBOX_URL;
if (!databaseUrl || !sandboxUrl) throw new Error('PEER_DATABASE_URL and SANDBOX_URL are required');
const send = (m: unknown) => process.send?.(m);

// 10 connections, as onceflow's worker has for the same steps.
const pool = createPool(databaseUrl, { max: 10 });
const provider = { baseUrl: sandboxUrl, timeoutMs: 10_000 };
const payments = createSandboxPaymentProvider(provider);
const email = createSandboxEmailProvider(provider);

interface PeerOrder {
  tenantId: string;
  id: string;
  email: string;
  amount: number;
  currency: string;
  paymentMethod: string;
}

async function setStatus(o: PeerOrder, status: string, chargeId?: string, receiptId?: string): Promise<void> {
  await pool.query(
    `update peer_orders set status = $3, charge_id = coalesce($4, charge_id),
            receipt_id = coalesce($5, receipt_id), updated_at = now()
      where tenant_id = $1 and id = $2`,
    [o.tenantId, o.id, status, chargeId ?? null, receiptId ?? null],
  );
}

const providerStep = { retriesAllowed: true, intervalSeconds: 1, maxAttempts: 5 };

const peerOrder = DBOS.registerWorkflow(
  async (o: PeerOrder): Promise<string> => {
    const workflowId = DBOS.workflowID ?? o.id;
    const metadata = { order_id: o.id, tenant_id: o.tenantId };
    await DBOS.runStep(
      async () => {
        await pool.query(
          `insert into peer_orders (tenant_id, id, status, email, amount, currency)
           values ($1, $2, 'accepted', $3, $4, $5) on conflict do nothing`,
          [o.tenantId, o.id, o.email, o.amount, o.currency],
        );
      },
      { name: 'accepted' },
    );
    await DBOS.runStep(() => setStatus(o, 'payment_pending'), { name: 'payment_pending' });
    const chargeKey = `${workflowId}/charge`;
    const charge = await DBOS.runStep(
      () =>
        payments.createCharge(
          {
            amount: o.amount,
            currency: o.currency,
            paymentMethod: o.paymentMethod,
            description: `Order ${o.id}`,
            metadata: { ...metadata, operation_key: chargeKey },
          },
          chargeKey,
        ),
      { name: 'charge', ...providerStep },
    );
    if (charge.status !== 'succeeded') {
      await DBOS.runStep(() => setStatus(o, 'rejected', charge.id), { name: 'rejected' });
      return 'rejected';
    }
    await DBOS.runStep(() => setStatus(o, 'paid', charge.id), { name: 'paid' });
    const receiptKey = `${workflowId}/receipt`;
    const message = await DBOS.runStep(
      () =>
        email.sendMessage(
          {
            to: o.email,
            subject: `Receipt for order ${o.id}`,
            text: `We received ${o.amount} ${o.currency} for order ${o.id} (charge ${charge.id}).`,
            metadata: { ...metadata, operation_key: receiptKey },
          },
          receiptKey,
        ),
      { name: 'receipt', ...providerStep },
    );
    await DBOS.runStep(() => setStatus(o, 'completed', undefined, message.id), { name: 'completed' });
    return 'completed';
  },
  { name: 'peerOrder' },
);

/** The order bench/lib/stack.ts's orderToTerminal posts for client `i`: same amounts and cards. */
function orderFor(run: string, i: number): PeerOrder {
  return {
    tenantId: 'acme',
    id: `ord_peer_${run}_${i}`,
    email: `customer${i}@example.com`,
    amount: (1 + (i % 3)) * (1000 + (i % 7) * 250),
    currency: 'usd',
    paymentMethod: 'pm_card_visa',
  };
}

async function run(m: { count: number; concurrency: number; first: number; runId: string }) {
  const latenciesMs: number[] = [];
  let notCompleted = 0;
  let next = m.first;
  const secs = await closedLoop(
    'peer',
    m.count,
    m.concurrency,
    async () => {
      const o = orderFor(m.runId, next++);
      const t0 = performance.now();
      const handle = await DBOS.startWorkflow(peerOrder, { workflowID: o.id })(o);
      if ((await handle.getResult()) !== 'completed') notCompleted++;
      latenciesMs.push(performance.now() - t0);
    },
    { say: () => undefined, deadline: Date.now() + 30 * 60_000, onTenth: () => undefined },
  );
  return { secs, latenciesMs, notCompleted };
}

await pool.query(`create table if not exists peer_orders (
  tenant_id text not null, id text not null, status text not null, email text not null,
  amount integer not null, currency text not null, charge_id text, receipt_id text,
  created_at timestamptz not null default now(), updated_at timestamptz not null default now(),
  primary key (tenant_id, id))`);
// DBOS's system-database pool defaults to 10 connections; the parent gives it 20, as many as
// onceflow's API has (it and the worker share max_connections with onceflow's stack).
const systemDatabasePoolSize = Number(process.env.PEER_SYSTEM_POOL ?? 20);
DBOS.setConfig({
  name: 'onceflow-peer',
  systemDatabaseUrl: databaseUrl,
  systemDatabasePoolSize,
  logLevel: 'warn',
});
await DBOS.launch();

process.on('message', (raw) => {
  const m = raw as { type: string; count: number; concurrency: number; first: number; runId: string };
  if (m.type === 'run') {
    run(m).then(
      (r) => send({ type: 'done', ...r }),
      (err: unknown) => send({ type: 'error', message: err instanceof Error ? err.stack : String(err) }),
    );
  } else if (m.type === 'stop') {
    void DBOS.shutdown()
      .then(() => pool.end())
      .finally(() => process.exit(0));
  }
});
send({ type: 'ready' });
