/**
 * `npm run demo`: drives the running stack (`npm start`) like a crowd of
 * flaky clients on a flaky network, then checks the invariants that make the
 * product trustworthy:
 *
 *   charges at the provider = paid orders, receipts = completed orders,
 *   no order charged or emailed twice, every order terminal or needs_attention;
 *   and for the refunds it makes on a few completed orders: no refund total
 *   above the charge (at the provider, in the API's refunds, in the order's
 *   refundedAmount), one provider refund per succeeded refund and none for a
 *   failed one (counted at the sandbox's audit, GET /_sandbox/refunds?order_id=),
 *   every refund terminal; every terminal order's event delivered to the
 *   merchant's webhook endpoint (scripts/demo-webhooks.ts), none missing.
 *
 * It submits ~200 orders from 2 tenants, retries ~20% of requests with the
 * same key, reuses a few keys with a different body, turns on every kind of
 * sandbox fault, and includes some declined cards. Exit code 1 if any
 * invariant breaks.
 *
 * It talks to the API through the typed client (@onceflow/client), as a caller
 * should: each planned order is one intent with one key, and the client's
 * own retries (lost responses, 5xx, 409, 429) reuse it.
 */
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../src/config.ts';
import { runningLocalMail } from '../dev/mail/local.ts';
import { DEMO_TENANTS } from '../src/api/demo-keys.ts';
import {
  ProblemError,
  WaitTimeoutError,
  createOnceflowClient,
  type CreateOrderBody,
  type CreateOrderResult,
  type CreatedOrder,
  type OnceflowClient,
  type OrderDetail,
  type Refund,
} from '@onceflow/client';
import { createCommand, parseCli, positiveInt } from '../src/cli/command.ts';
import { missingEvents, startDemoMerchant, type DemoMerchant } from './demo-webhooks.ts';

const program = createCommand(
  'demo',
  'Drive the running stack (`npm start`) with ~200 flaky clients and check the invariants. ' +
    'Exit 1 if one breaks, 2 if the stack is not running.',
)
  .option('--orders <n>', 'orders to submit', positiveInt, 200)
  .option('--concurrency <n>', 'orders submitted at once', positiveInt, 8)
  .option('--timeout-seconds <n>', 'how long to wait for every order to settle', positiveInt, 900)
  .addHelpText('after', '\nRun as: npm run demo -- [options]. DEMO_API_URL overrides the API address.');
parseCli(program);
const args = program.opts<{ orders: number; concurrency: number; timeoutSeconds: number }>();
const config = loadConfig();
const API = config.demo.apiUrl;
const SANDBOX = config.sandboxUrl;
/** The stack sends receipts to the local SMTP server (EMAIL_PROVIDER=smtp): they are counted in its mailbox. */
const MAIL = await runningLocalMail(config, process.env);
// Defaults: the published local demo keys (src/api/demo-keys.ts), seeded by `npm start` on loopback.
const TENANTS = [
  { id: 'acme', key: config.demo.acmeKey ?? DEMO_TENANTS[0].key },
  { id: 'globex', key: config.demo.globexKey ?? DEMO_TENANTS[1].key },
];
const ORDER_COUNT = args.orders;
const CONCURRENCY = args.concurrency;
const TIMEOUT_MS = args.timeoutSeconds * 1000;
const TERMINAL = new Set(['completed', 'rejected', 'needs_attention']);
const runId = randomBytes(4).toString('hex');

interface Planned {
  index: number;
  tenant: (typeof TENANTS)[number];
  key: string;
  body: CreateOrderBody;
  retry: 'none' | 'concurrent' | 'after';
  conflict: boolean;
  declined: boolean;
}

type OrderView = OrderDetail;

const counts = {
  requests: 0,
  duplicatesAbsorbed: 0,
  conflictsRejected: 0,
  unexpected: [] as string[],
};

/** One typed client per tenant (@onceflow/client): retries with the same key, backoff, Retry-After. */
const clients = new Map<string, OnceflowClient>();
function clientFor(tenant: Planned['tenant']): OnceflowClient {
  let c = clients.get(tenant.id);
  if (!c) {
    c = createOnceflowClient({
      baseUrl: API,
      apiKey: tenant.key,
      onAttempt: (a) => {
        if (a.method === 'POST') counts.requests++;
      },
    });
    clients.set(tenant.id, c);
  }
  return c;
}

type Posted = { ok: true; result: CreateOrderResult } | { ok: false; error: unknown };

/** One intent's call: the planned key (born in plan()) is the key every attempt of it carries. */
async function post(p: Planned, body = p.body): Promise<Posted> {
  try {
    return { ok: true, result: await clientFor(p.tenant).createOrder(body, { idempotencyKey: p.key }) };
  } catch (error) {
    return { ok: false, error };
  }
}

const describe = (r: Posted) =>
  r.ok ? `202 ${r.result.order.id}` : r.error instanceof Error ? r.error.message : String(r.error);

function plan(): Planned[] {
  const planned: Planned[] = [];
  for (let i = 0; i < ORDER_COUNT; i++) {
    const tenant = TENANTS[i % TENANTS.length]!;
    const declined = i % 25 === 7; // ~4% declined cards
    const quantity = 1 + (i % 3);
    planned.push({
      index: i,
      tenant,
      key: `demo-${runId}-${i}`,
      body: {
        customer: { id: `cus_${i % 17}`, email: `customer${i}@example.com` },
        currency: 'usd',
        items: [{ sku: `SKU-${i % 5}`, quantity, unitAmount: 1000 + (i % 7) * 250 }],
        paymentMethod: declined ? 'pm_card_chargeDeclined' : 'pm_card_visa',
      },
      // ~20% of client requests are retried with the same key: half while the first is in flight.
      retry: i % 10 === 3 ? 'concurrent' : i % 10 === 8 ? 'after' : 'none',
      conflict: i % 40 === 11, // a few keys reused with a different body
      declined,
    });
  }
  return planned;
}

async function pool<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

function progress(label: string, done: number, total: number): void {
  if (!process.stdout.isTTY) {
    // Logs and CI: one line per 10%.
    if (done === total || done % Math.max(1, Math.round(total / 10)) === 0)
      console.log(`${label} ${done}/${total}`);
    return;
  }
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stdout.write(
    `\r${label.padEnd(12)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}`,
  );
  if (done === total) process.stdout.write('\n');
}

/** Sums a counter from the worker's Prometheus endpoint, by label filter; null if unreachable. */
async function workerCounter(name: string, match: (labels: string) => boolean): Promise<number | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${config.ports.workerMetrics}/metrics`);
    if (!res.ok) return null;
    let sum = 0;
    for (const line of (await res.text()).split('\n')) {
      const m = /^(\w+)\{([^}]*)\} ([0-9.e+-]+)$/.exec(line);
      if (m && m[1] === name && match(m[2]!)) sum += Number(m[3]);
    }
    return sum;
  } catch {
    return null;
  }
}

const ledgerCounters = async () => ({
  unknown: await workerCounter('onceflow_ledger_unknown_outcomes_total', () => true),
  reconciled: await workerCounter('onceflow_ledger_reconciliations_total', (l) =>
    /outcome="(succeeded|failed|settled:[a-z]+)"/.test(l),
  ),
  notFound: await workerCounter('onceflow_ledger_reconciliations_total', (l) =>
    l.includes('outcome="not_found"'),
  ),
});

async function sandbox(path: string, init?: RequestInit): Promise<unknown> {
  const res = await fetch(`${SANDBOX}${path}`, init);
  if (!res.ok) throw new Error(`sandbox ${path}: HTTP ${res.status}`);
  return res.json();
}

/**
 * Receipts in the local SMTP server's mailbox, one per Message-ID: under the
 * at-least-once policy a resend of one receipt carries the same Message-ID
 * and is the same receipt, not a second one.
 */
async function mailboxReceipts(
  mailboxUrl: string,
): Promise<{ order_id?: string; metadata?: { order_id?: string; refund_id?: string } }[]> {
  const res = await fetch(`${mailboxUrl}/messages`);
  if (!res.ok) throw new Error(`mailbox: HTTP ${res.status}`);
  const { data } = (await res.json()) as {
    data: { messageId: string | null; headers: Record<string, string> }[];
  };
  const byId = new Map<string, { order_id?: string; metadata?: { order_id?: string; refund_id?: string } }>();
  for (const m of data) {
    const order = m.headers['x-onceflow-order'];
    // A refund's receipt names its order too; its operation key (refund/<tenant>/<refund id>/…) tells it apart.
    const refundId = /^refund\/[^/]+\/([^/]+)\//.exec(m.headers['x-onceflow-operation'] ?? '')?.[1];
    if (m.messageId)
      byId.set(m.messageId, {
        ...(order ? { order_id: order } : {}),
        ...(refundId ? { metadata: { refund_id: refundId } } : {}),
      });
  }
  return [...byId.values()];
}

async function setFaults(): Promise<void> {
  await sandbox('/_sandbox/faults', { method: 'DELETE' });
  // Longer than the worker's provider timeout, so the call times out and is reconciled.
  const slow = config.providerTimeoutMs + 2_000;
  const faults = [
    ['charges.create', 'fail_before', 3],
    ['charges.create', 'fail_after', 3],
    ['charges.create', 'drop_after', 3],
    ['charges.create', 'delay', 2, slow],
    ['charges.lookup', 'fail_before', 2],
    ['messages.create', 'fail_before', 3],
    ['messages.create', 'fail_after', 3],
    ['messages.create', 'drop_after', 3],
    ['messages.create', 'delay', 2, slow],
    ['refunds.create', 'drop_after', 2],
    ['refunds.create', 'fail_before', 1],
    ['refunds.lookup', 'fail_before', 1],
  ] as const;
  for (const [endpoint, kind, count, delayMs] of faults) {
    if (MAIL && endpoint.startsWith('messages.')) {
      // The same plan on the SMTP server: refused before the data, or delivered with the answer lost.
      const fault =
        kind === 'fail_before'
          ? { kind: 'reject_temporary', count }
          : { kind: 'delay_after_data', count, delayMs: slow };
      await fetch(`${MAIL.mailboxUrl}/faults`, { method: 'POST', body: JSON.stringify(fault) });
      continue;
    }
    await sandbox('/_sandbox/faults', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ endpoint, kind, count, ...(delayMs ? { delayMs } : {}) }),
    });
  }
  console.log(`faults on: ${faults.map(([e, k, c]) => `${e} ${k} x${c}`).join(', ')}`);
}

async function submit(p: Planned, created: Map<number, CreatedOrder>): Promise<void> {
  const first = post(p);
  const concurrentRetry = p.retry === 'concurrent' ? post(p) : undefined;
  const original = await first;
  if (!original.ok) {
    counts.unexpected.push(`order ${p.index}: POST failed: ${describe(original)}`);
    return;
  }
  created.set(p.index, original.result.order);

  const retries = [concurrentRetry, p.retry === 'after' ? post(p) : undefined].filter(Boolean);
  for (const retry of retries) {
    const r = await retry!;
    // The client retries a 409 "still processing" itself, so a duplicate ends as the replay.
    if (r.ok && r.result.order.id === original.result.order.id) {
      if (!r.result.replayed && !original.result.replayed) {
        counts.unexpected.push(
          `order ${p.index}: a retry created a second response without the replay header`,
        );
      }
      counts.duplicatesAbsorbed++;
    } else {
      counts.unexpected.push(`order ${p.index}: retry answered ${describe(r)}`);
    }
  }
  if (p.conflict) {
    const other = { ...p.body, paymentMethod: p.declined ? 'pm_card_visa' : 'pm_card_mastercard' };
    const r = await post(p, other);
    if (!r.ok && r.error instanceof ProblemError && r.error.status === 422) counts.conflictsRejected++;
    else
      counts.unexpected.push(`order ${p.index}: a conflicting reuse answered ${describe(r)}, expected 422`);
  }
}

async function settle(p: Planned, order: CreatedOrder, deadline: number): Promise<OrderView> {
  try {
    return await clientFor(p.tenant).waitForOrder(order.id, { timeoutMs: deadline - Date.now() });
  } catch (err) {
    // Out of time: report the last view; the "every order terminal" check then fails.
    if (err instanceof WaitTimeoutError) return err.order as OrderView;
    throw err;
  }
}

async function main(): Promise<void> {
  try {
    const ready = await fetch(`${API}/readyz`);
    if (!ready.ok) throw new Error(`HTTP ${ready.status}`);
    await sandbox('/healthz');
  } catch (err) {
    console.error(
      `The stack is not running (${API}, ${SANDBOX}): ${String(err)}\nStart it with \`npm start\` first.`,
    );
    process.exit(2);
  }
  // The demo keys come from the seed step (npm start on loopback, or npm run seed), not from migrations.
  for (const t of TENANTS) {
    const res = await fetch(`${API}/v1/orders?limit=1`, { headers: { authorization: `Bearer ${t.key}` } });
    if (res.status === 401) {
      console.error(
        `The API does not know the key for tenant ${t.id}. Seed the local demo keys with \`npm run seed\`, ` +
          `or pass real keys as DEMO_ACME_KEY / DEMO_GLOBEX_KEY (npm run api-key).`,
      );
      process.exit(2);
    }
    await res.arrayBuffer();
  }
  console.log(
    `onceflow demo ${runId}: ${ORDER_COUNT} orders, ${TENANTS.length} tenants, concurrency ${CONCURRENCY}`,
  );
  await setFaults();
  const merchant = await startDemoMerchant(API, TENANTS);

  const before = await ledgerCounters();
  const planned = plan();
  const created = new Map<number, CreatedOrder>();
  let submitted = 0;
  try {
    await pool(planned, CONCURRENCY, async (p) => {
      await submit(p, created);
      progress('submitted', ++submitted, planned.length);
    });

    const deadline = Date.now() + TIMEOUT_MS;
    const finals = new Map<number, OrderView>();
    let settled = 0;
    await pool(
      planned.filter((p) => created.has(p.index)),
      32,
      async (p) => {
        finals.set(p.index, await settle(p, created.get(p.index)!, deadline));
        progress('settled', ++settled, created.size);
      },
    );
    const refunds = await refundSome(planned, finals, deadline);
    const after = await ledgerCounters();
    const delta = (k: keyof typeof before) =>
      before[k] === null || after[k] === null ? null : after[k]! - before[k]!;
    await report(
      planned,
      finals,
      {
        unknown: delta('unknown'),
        reconciled: delta('reconciled'),
        notFound: delta('notFound'),
      },
      refunds,
      merchant,
    );
  } finally {
    await merchant.close();
    await sandbox('/_sandbox/faults', { method: 'DELETE' }).catch(() => undefined);
  }
}

/** Completed orders that get refunds: a few, so the demo stays an order demo. */
const REFUND_ORDERS = 10;

interface RefundsDone {
  /** Every refund the API accepted, in its last view, with the amount its order was charged. */
  refunds: { refund: Refund; charged: number }[];
  /** Each refunded order as the API shows it once its refunds are terminal. */
  orders: { orderId: string; charged: number; refundedAmount: number }[];
  /** Refunds that would have gone past the charge, refused with 422 refund-exceeds-charge. */
  refusedOverCharge: number;
  /** How many were planned to be refused. */
  plannedOverCharge: number;
}

/**
 * Refunds on a few completed orders: two real refunds of the same amount
 * under two keys, at once (both must happen: a refund has no natural key),
 * then one that would take the total past the charge (it must be refused).
 */
async function refundSome(
  planned: Planned[],
  finals: Map<number, OrderView>,
  deadline: number,
): Promise<RefundsDone> {
  const chosen = planned.filter((p) => finals.get(p.index)?.status === 'completed').slice(0, REFUND_ORDERS);
  const done: RefundsDone = {
    refunds: [],
    orders: [],
    refusedOverCharge: 0,
    plannedOverCharge: chosen.length,
  };
  let n = 0;
  await pool(chosen, 8, async (p) => {
    const order = finals.get(p.index)!;
    const client = clientFor(p.tenant);
    const third = Math.max(1, Math.floor(order.amount / 3));
    const pair = await Promise.allSettled([
      client.createRefund(order.id, { amount: third, reason: 'requested_by_customer' }),
      client.createRefund(order.id, { amount: third, reason: 'requested_by_customer' }),
    ]);
    const accepted: Refund[] = [];
    for (const r of pair) {
      if (r.status === 'fulfilled') accepted.push(r.value.refund);
      else counts.unexpected.push(`refund of ${order.id}: ${String(r.reason)}`);
    }
    try {
      const over = await client.createRefund(order.id, { amount: order.amount - 2 * third + 1 });
      counts.unexpected.push(`refund of ${order.id} past the charge was accepted (${over.refund.id})`);
      accepted.push(over.refund);
    } catch (err) {
      if (err instanceof ProblemError && err.status === 422) done.refusedOverCharge++;
      else counts.unexpected.push(`refund of ${order.id} past the charge answered ${String(err)}`);
    }
    for (const refund of accepted) {
      let view = refund;
      while (!REFUND_TERMINAL.has(view.status) && Date.now() < deadline) {
        const waitSeconds = Math.max(1, Math.min(30, Math.ceil((deadline - Date.now()) / 1000)));
        view = await client.getRefund(order.id, refund.id, { waitSeconds });
      }
      done.refunds.push({ refund: view, charged: order.amount });
    }
    const after = await client.getOrder(order.id);
    done.orders.push({ orderId: order.id, charged: order.amount, refundedAmount: after.refundedAmount });
    progress('refunded', ++n, chosen.length);
  });
  return done;
}

const REFUND_TERMINAL = new Set(['succeeded', 'failed', 'needs_attention']);

type ProviderRefund = { id: string; amount: number; status: string; metadata?: { refund_id?: string } };

/**
 * The refund invariants, per refunded order, counted at the provider's own
 * audit (`/_sandbox/refunds?order_id=`): what was really refunded.
 */
async function checkRefunds(done: RefundsDone): Promise<{
  overCharge: string[];
  notOne: string[];
  moving: number;
  atProvider: number;
}> {
  const overCharge: string[] = [];
  const notOne: string[] = [];
  let atProvider = 0;
  for (const order of done.orders) {
    const provider = (
      (await sandbox(`/_sandbox/refunds?order_id=${encodeURIComponent(order.orderId)}`)) as {
        data: ProviderRefund[];
      }
    ).data;
    atProvider += provider.length;
    const refunds = done.refunds.filter((r) => r.refund.orderId === order.orderId).map((r) => r.refund);
    const refundedAtProvider = provider
      .filter((p) => p.status === 'succeeded')
      .reduce((sum, p) => sum + p.amount, 0);
    const held = refunds.filter((r) => r.status !== 'failed').reduce((sum, r) => sum + r.amount, 0);
    if (refundedAtProvider > order.charged)
      overCharge.push(`${order.orderId}: provider refunded ${refundedAtProvider} of ${order.charged}`);
    if (held > order.charged)
      overCharge.push(`${order.orderId}: refunds not failed hold ${held} of ${order.charged}`);
    if (order.refundedAmount > order.charged)
      overCharge.push(`${order.orderId}: refundedAmount ${order.refundedAmount} of ${order.charged}`);

    const ours = new Set(refunds.map((r) => r.id));
    for (const p of provider) {
      if (!ours.has(p.metadata?.refund_id ?? ''))
        notOne.push(`${order.orderId}: provider refund ${p.id} of no refund`);
    }
    for (const r of refunds) {
      const made = provider.filter((p) => p.metadata?.refund_id === r.id && p.status === 'succeeded').length;
      const want = r.status === 'succeeded' ? 1 : r.status === 'failed' ? 0 : made > 1 ? 1 : made;
      if (made !== want) notOne.push(`${r.id} (${r.status}): ${made} provider refunds`);
    }
  }
  const moving = done.refunds.filter((r) => !REFUND_TERMINAL.has(r.refund.status)).length;
  return { overCharge, notOne, moving, atProvider };
}

async function report(
  planned: Planned[],
  finals: Map<number, OrderView>,
  ledger: { unknown: number | null; reconciled: number | null; notFound: number | null },
  refundsDone: RefundsDone,
  merchant: DemoMerchant,
): Promise<void> {
  const orderIds = new Set([...finals.values()].map((o) => o.id));
  const charges = (
    (await sandbox('/_sandbox/charges')) as {
      data: { status: string; order_id?: string; metadata?: { order_id?: string } }[];
    }
  ).data;
  const messages = MAIL
    ? await mailboxReceipts(MAIL.mailboxUrl)
    : (
        (await sandbox('/_sandbox/messages')) as {
          data: { order_id?: string; metadata?: { order_id?: string; refund_id?: string } }[];
        }
      ).data;
  const orderOf = (e: { order_id?: string; metadata?: { order_id?: string } }) =>
    e.order_id ?? e.metadata?.order_id ?? '';
  const ours = <T extends { order_id?: string; metadata?: { order_id?: string } }>(list: T[]) =>
    list.filter((e) => orderIds.has(orderOf(e)));
  const succeededCharges = ours(charges).filter((c) => c.status === 'succeeded');
  // Order receipts only: a refund receipt carries its refund_id (and is checked below).
  const receipts = ours(messages).filter(
    (m) => !(m as { metadata?: { refund_id?: string } }).metadata?.refund_id,
  );
  const refundChecks = await checkRefunds(refundsDone);
  const succeededRefunds = refundsDone.refunds.filter((r) => r.refund.status === 'succeeded');

  const byStatus = new Map<string, number>();
  for (const o of finals.values()) byStatus.set(o.status, (byStatus.get(o.status) ?? 0) + 1);
  const paid = [...finals.values()].filter((o) => o.chargeId && o.status !== 'rejected');
  const completed = byStatus.get('completed') ?? 0;
  const perOrder = (list: { order_id?: string; metadata?: { order_id?: string } }[]) => {
    const m = new Map<string, number>();
    for (const e of list) m.set(orderOf(e), (m.get(orderOf(e)) ?? 0) + 1);
    return m;
  };
  const doubleCharges = [...perOrder(succeededCharges).values()].filter((n) => n > 1).length;
  const doubleReceipts = [...perOrder(receipts).values()].filter((n) => n > 1).length;
  const reconciled = [...finals.values()].filter((o) =>
    (o.steps ?? []).some((s) => s.name === 'charge' && s.attempts > 1 && s.state === 'succeeded'),
  );
  const notSettled = [...finals.values()].filter((o) => !TERMINAL.has(o.status));
  const undelivered = await missingEvents(
    merchant,
    [...finals.values()].filter((o) => TERMINAL.has(o.status)),
    60_000,
  );

  const checks: [string, boolean, string][] = [
    [
      'charges at the provider = paid orders',
      succeededCharges.length === paid.length,
      `${succeededCharges.length} vs ${paid.length}`,
    ],
    ['receipts = completed orders', receipts.length === completed, `${receipts.length} vs ${completed}`],
    ['no order charged twice', doubleCharges === 0, `${doubleCharges}`],
    ['no order emailed twice', doubleReceipts === 0, `${doubleReceipts}`],
    ['every order terminal or needs_attention', notSettled.length === 0, `${notSettled.length} still moving`],
    ['every order was created', finals.size === planned.length, `${finals.size}/${planned.length}`],
    ['no unexpected HTTP answers', counts.unexpected.length === 0, `${counts.unexpected.length}`],
    [
      'no refund total above the charge (provider, refunds, refundedAmount)',
      refundChecks.overCharge.length === 0,
      `${refundChecks.overCharge.length}${refundChecks.overCharge.length ? `: ${refundChecks.overCharge.slice(0, 3).join('; ')}` : ''}`,
    ],
    [
      'one provider refund per refund (succeeded: 1, failed: 0, none unaccounted)',
      refundChecks.notOne.length === 0,
      `${refundChecks.notOne.length}${refundChecks.notOne.length ? `: ${refundChecks.notOne.slice(0, 3).join('; ')}` : ''}`,
    ],
    [
      'refunds past the charge refused (422)',
      refundsDone.refusedOverCharge === refundsDone.plannedOverCharge,
      `${refundsDone.refusedOverCharge}/${refundsDone.plannedOverCharge}`,
    ],
    ['every refund terminal', refundChecks.moving === 0, `${refundChecks.moving} still moving`],
    [
      "every terminal order's event delivered, none missing",
      undelivered.length === 0,
      `${undelivered.length} missing${undelivered.length ? `: ${undelivered.slice(0, 3).join(', ')}` : ''}`,
    ],
    [
      'every delivery signed with the endpoint secret',
      merchant.badSignatures === 0,
      `${merchant.badSignatures} bad`,
    ],
  ];

  const rows: [string, string | number][] = [
    ['orders created', finals.size],
    ['HTTP requests sent', counts.requests],
    ['duplicate requests absorbed', counts.duplicatesAbsorbed],
    ['conflicting key reuses rejected (422)', counts.conflictsRejected],
    ['orders completed', completed],
    ['orders rejected (declined card)', byStatus.get('rejected') ?? 0],
    ['orders needing attention', byStatus.get('needs_attention') ?? 0],
    ['charges at the provider', succeededCharges.length],
    ['paid orders', paid.length],
    ['receipts sent', receipts.length],
    ['unknown outcomes (worker metrics)', ledger.unknown ?? 'n/a'],
    ['unknown outcomes reconciled (worker metrics)', ledger.reconciled ?? 'n/a'],
    ['  found never to have happened, retried under the same key', ledger.notFound ?? 'n/a'],
    ['orders whose charge took more than one attempt', reconciled.length],
    ['refunds accepted (two of one amount per order)', refundsDone.refunds.length],
    ['refunds succeeded', succeededRefunds.length],
    ['refunds at the provider', refundChecks.atProvider],
    ['order events received by the merchant', merchant.received.size],
    ['  redelivered event IDs the merchant deduplicated', merchant.duplicates],
  ];
  const width = Math.max(...rows.map(([k]) => k.length)) + 2;
  console.log('\n' + '='.repeat(width + 10));
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}${String(v).padStart(8)}`);
  console.log('='.repeat(width + 10));
  for (const [name, ok, detail] of checks) console.log(`${ok ? 'PASS' : 'FAIL'}  ${name} (${detail})`);
  for (const line of counts.unexpected.slice(0, 10)) console.log(`  unexpected: ${line}`);

  const ui = `${config.temporal.uiUrl}/namespaces/${config.temporal.namespace}/workflows`;
  const interesting =
    reconciled[0] ??
    [...finals.values()].find((o) => o.status === 'needs_attention') ??
    [...finals.values()][0];
  if (interesting) {
    console.log(
      `\nAn interesting order (${interesting.status}): ${ui}/${encodeURIComponent(interesting.workflowId)}`,
    );
  }
  console.log(`All orders in the UI: ${ui}?query=${encodeURIComponent('WorkflowType="orderWorkflow"')}`);
  if (checks.some(([, ok]) => !ok)) {
    console.log('\nAn invariant broke.');
    process.exit(1);
  }
  console.log('\nAll invariants hold.');
}

await main();
