/**
 * The operator console (/console, src/console/routes.ts and console/) in a
 * real browser (Debian's Chromium through playwright-core) against the real
 * stack: the API as src/api/main.ts builds it, a worker, the sandbox and the
 * run's Temporal server. An order parked through sandbox faults is found on
 * the Attention page, its re-drive previewed and confirmed, and it completes
 * with the audit row shown; an unknown charge is resolved with a reason; the
 * console refuses a missing, revoked or tenant credential, and a cross-site
 * form post to an action carries no credential and changes nothing. A
 * refund parked through sandbox faults is on the Attention page with its
 * actions, re-driven from there with its audit row shown, and the Audit page
 * narrows to it by its filters. Every page passes axe-core. Screenshots go to test-results/; with
 * UPDATE_DOCS_IMAGES=1 also to docs/images/ (docs/OPERATIONS.md shows them).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { CONSOLE_CSP } from '../../src/console/routes.ts';
import { insertApiKey } from '../../src/tenants/sql.ts';
import {
  generateOperatorToken,
  hashOperatorToken,
  insertOperator,
  revokeOperator,
} from '../../src/operator/accounts-sql.ts';
import { downstreamKey } from 'onceflow';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { startRefund } from '../support/refunds.ts';
import { until } from '../support/wait.ts';
import { launchChromium } from '../support/chromium.ts';
import { axe, openConsole, shoot, signIn } from '../support/console.ts';
import { testConfig } from '../api/support.ts';
import { uniq } from '../support/env.ts';

let stack: OrderStack;
let browser: Browser;
let app: FastifyInstance;
let base: string;
let operatorName: string;
let operatorToken: string;
const servers: http.Server[] = [];

beforeAll(async () => {
  stack = await startOrderStack();
  const config = testConfig({ SANDBOX_URL: stack.sandbox.url, TEMPORAL_TASK_QUEUE: stack.taskQueue });
  app = await buildApiServer({ pool: stack.pool, ledger: stack.ledger, temporal: stack.client, config });
  await app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  operatorName = uniq('oncall').toLowerCase();
  operatorToken = generateOperatorToken();
  await insertOperator(stack.pool, { name: operatorName, tokenHash: hashOperatorToken(operatorToken) });
  browser = await launchChromium();
});

afterAll(async () => {
  for (const s of servers) s.close();
  await browser?.close();
  await app?.close();
  await stack?.close();
});

async function parkedOnReceipt(): Promise<{ orderId: string; workflowId: string }> {
  await stack.fault('messages.create', 'fail_before', 1000);
  const { input, workflowId } = await stack.startOrder();
  await expect
    .poll(async () => (await stack.orderRow(input)).status, { timeout: 60_000, interval: 200 })
    .toBe('needs_attention');
  return { orderId: input.orderId, workflowId };
}

it('serves its own files only, under a strict CSP, and nothing inline', async () => {
  const res = await fetch(`${base}/console`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
  expect(CONSOLE_CSP).not.toMatch(/unsafe-inline|unsafe-eval|https?:/);
  const html = await res.text();
  expect(html).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/); // no inline script element
  expect(html).not.toMatch(/\son[a-z]+=/); // no inline handlers
  expect(html).not.toMatch(/\sstyle=/);
  // Assets from the console's own path, links within the page.
  for (const src of html.matchAll(/(?:src|href)="([^"]+)"/g)) expect(src[1]).toMatch(/^(\/console\/|#\/)/);
  for (const file of ['app.js', 'app.css', 'favicon.svg']) {
    const asset = await fetch(`${base}/console/${file}`);
    expect(asset.status, file).toBe(200);
    expect(asset.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
  }
});

it('takes a parked order from the Attention page to completed: preview, confirm, audit row', async () => {
  const { orderId, workflowId } = await parkedOnReceipt();
  const { page, problems } = await openConsole(browser, base);
  await signIn(page, operatorToken);
  const link = page.getByRole('link', { name: orderId });
  await link.waitFor({ timeout: 30_000 });
  await shoot(page, 'console-attention');
  await link.click();
  await expect.poll(() => page.locator('#order-status').textContent()).toBe('needs_attention');

  // The preview before anything runs: the charge replays, the receipt is asked about first.
  await page.getByRole('button', { name: 'Preview re-drive' }).click();
  await page.locator('li[data-step="receipt"]').waitFor();
  expect(await page.locator('li[data-step="charge"]').getAttribute('class')).toBe('effect-replay');
  expect(await page.locator('li[data-step="receipt"]').textContent()).toMatch(/receipt: /);
  const confirm = page.getByRole('button', { name: 'Confirm re-drive' });
  expect(await confirm.isDisabled()).toBe(true); // no reason yet
  await shoot(page, 'console-order');

  await stack.clearFaults();
  await page.locator('#redrive-reason').fill('receipt provider recovered (console test)');
  await confirm.click();
  const outcome = page.getByText(/Re-drive accepted/);
  await outcome.waitFor({ timeout: 30_000 });
  // The result sits next to the audit row it wrote, with the actor from the credential.
  const auditRow = page.locator('tr[data-audit-id]').first();
  expect(await auditRow.textContent()).toContain(operatorName);
  expect(await auditRow.textContent()).toContain('operator_token');

  await expect
    .poll(
      async () => {
        await page.getByRole('button', { name: 'Reload' }).click();
        return page.locator('#order-status').textContent();
      },
      { timeout: 60_000, interval: 500 },
    )
    .toBe('completed');
  expect((await stack.messages(orderId)).length).toBe(1);
  const audit = await stack.pool.query<{ action: string; actor: string }>(
    `select action, actor from audit_log where workflow_id = $1 order by id`,
    [workflowId],
  );
  expect(audit.rows.map((r) => r.action)).toEqual(['redrive_requested', 'redrive']);
  expect(new Set(audit.rows.map((r) => r.actor))).toEqual(new Set([operatorName]));
  expect(problems).toEqual([]);
  await page.context().close();
});

it('resolves an unknown charge with a reason, shown with its audit row, and the order completes', async () => {
  // The charge's response is lost and the provider can't be asked: the outcome stays unknown and parks.
  await stack.fault('charges.create', 'drop_after', 100);
  await stack.fault('charges.lookup', 'fail_before', 1000);
  const { input } = await stack.startOrder();
  await expect
    .poll(async () => (await stack.orderRow(input)).status, { timeout: 60_000, interval: 200 })
    .toBe('needs_attention');
  const charged = await stack.charges(input.orderId);
  expect(charged).toHaveLength(1);

  const { page, problems } = await openConsole(browser, base);
  await signIn(page, operatorToken);
  await page.goto(`${base}/console#/order/${input.tenantId}/${input.orderId}`);
  await page.getByRole('button', { name: 'Reconcile now' }).waitFor();
  const confirm = page.getByRole('button', { name: 'Confirm resolve' });
  expect(await confirm.isDisabled()).toBe(true);
  await page.getByLabel('Outcome').selectOption('succeeded');
  expect(await page.getByText(/Resolving records payment.charge/).textContent()).toMatch(/as succeeded/);
  await page
    .locator('textarea[id="reason-payment.charge"]')
    .fill(`provider dashboard shows ${charged[0]!.id} (console test)`);
  await stack.clearFaults();
  await confirm.click();
  await page.getByText(/Resolved: unknown → succeeded/).waitFor({ timeout: 30_000 });
  expect(await page.locator('tr[data-audit-id]').first().textContent()).toContain('resolve');
  await expect
    .poll(async () => (await stack.orderRow(input)).status, { timeout: 60_000, interval: 200 })
    .toBe('completed');
  expect(await stack.charges(input.orderId)).toHaveLength(1); // resolved, never charged again
  expect(problems).toEqual([]);
  await page.context().close();
});

it('refuses a missing, wrong, revoked or tenant credential', async () => {
  expect((await fetch(`${base}/admin/attention`)).status).toBe(401);
  const tenantKey = `sk_test_${uniq('k')}`;
  await insertApiKey(stack.pool, { keyHash: hashApiKey(tenantKey), tenantId: 'acme', label: 'console test' });
  const revokedName = uniq('gone').toLowerCase();
  const revokedToken = generateOperatorToken();
  await insertOperator(stack.pool, { name: revokedName, tokenHash: hashOperatorToken(revokedToken) });
  await revokeOperator(stack.pool, revokedName);

  const { page } = await openConsole(browser, base);
  for (const [what, token] of [
    ['a tenant API key', tenantKey],
    ['a revoked operator token', revokedToken],
    ['a made-up token', 'opk_not-a-real-token'],
  ] as const) {
    await signIn(page, token);
    // Refused (401), or throttled after several wrong credentials from this address (429).
    await page.getByText(/Signed out|Too many/).waitFor();
    expect(await page.getByRole('navigation').isHidden(), what).toBe(true);
    expect(await page.evaluate('sessionStorage.length'), what).toBe(0);
  }
  // A credential revoked while signed in stops at the next call.
  const laterName = uniq('later').toLowerCase();
  const laterToken = generateOperatorToken();
  await insertOperator(stack.pool, { name: laterName, tokenHash: hashOperatorToken(laterToken) });
  await signIn(page, laterToken);
  await page.getByRole('heading', { name: 'Attention' }).waitFor();
  await revokeOperator(stack.pool, laterName);
  await page.getByRole('link', { name: 'Audit' }).click();
  await page.getByText(/Signed out/).waitFor();
  await page.context().close();
});

it('a cross-site form post to an action carries no credential: 401, nothing audited', async () => {
  const { orderId, workflowId } = await parkedOnReceipt();
  // Another origin's page that posts a re-drive to the API as soon as it loads.
  const evil = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(
      `<form id="f" method="post" enctype="text/plain" action="${base}/admin/orders/acme/${orderId}/redrive">` +
        `<input name='{"reason":"x","a":"' value='"}'></form><script>document.getElementById('f').submit()</script>`,
    );
  });
  servers.push(evil);
  await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
  const page = await browser.newPage();
  const answer = page.waitForResponse((r) => r.url().includes('/redrive'));
  await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
  expect((await answer).status()).toBe(401);
  const audit = await stack.pool.query(`select 1 from audit_log where workflow_id = $1`, [workflowId]);
  expect(audit.rowCount).toBe(0);
  expect((await stack.orderRow({ tenantId: 'acme', orderId } as never)).status).toBe('needs_attention');
  await page.close();
  await stack.clearFaults();
});

/** A completed order's refund, parked: the provider never got it and could not be asked until the horizon. */
async function parkedRefund(): Promise<{
  orderId: string;
  refundId: string;
  workflowId: string;
  key: string;
}> {
  const { input, handle } = await stack.startOrder({ orderId: uniq('ord'), amount: 3000 });
  expect((await handle.result()).status).toBe('completed');
  const chargeId = (await stack.orderRow(input)).charge_id!;
  await stack.fault('refunds.create', 'fail_before', 1);
  await stack.fault('refunds.lookup', 'fail_before', 10_000);
  try {
    const r = await startRefund(stack, { input, chargeId }, 1200);
    await until(
      `refund ${r.refundId} parked`,
      () => r.handle.query<{ awaitingOperator: boolean }>('refundStatus'),
      {
        done: (s) => s.awaitingOperator,
        timeoutMs: 60_000,
        intervalMs: 200,
      },
    );
    expect(await refundStatus(r.refundId)).toBe('needs_attention');
    return { orderId: input.orderId, refundId: r.refundId, workflowId: r.workflowId, key: r.scope.key };
  } finally {
    await stack.clearFaults();
  }
}

const refundStatus = async (refundId: string) =>
  (
    await stack.pool.query<{ status: string }>(
      `select status from refunds where tenant_id = 'acme' and id = $1`,
      [refundId],
    )
  ).rows[0]?.status;

it('a parked refund is on the Attention page: filtered, previewed, re-driven with its audit row; the Audit page narrows to it', async () => {
  const refund = await parkedRefund();

  // First, with axe (its context bypasses the CSP to inject it): the page with refunds and the refund's actions.
  {
    const { page } = await openConsole(browser, base, { axe: true });
    await signIn(page, operatorToken);
    await page.getByRole('button', { name: refund.refundId }).waitFor({ timeout: 30_000 });
    await axe(page, 'attention with refunds');
    await page.getByRole('button', { name: refund.refundId }).click();
    await page.getByRole('button', { name: 'Preview refund re-drive' }).click();
    await page.locator('li[data-step="refund"]').waitFor();
    await shoot(page, 'console-refund');
    await axe(page, 'refund actions');
    await page.context().close();
  }

  const { page, problems } = await openConsole(browser, base);
  await signIn(page, operatorToken);
  const row = page.locator(`tr[data-refund-id="${refund.refundId}"]`);
  await row.waitFor({ timeout: 30_000 });
  const cells = await row.locator('td').allTextContents();
  expect(cells.slice(0, 5)).toEqual([refund.refundId, refund.orderId, 'acme', 'needs_attention', '1200 usd']);
  // The reason filter covers both lists: a refund status hides every order (one is parked from the test above).
  const orderRows = page.locator('table').first().locator('tbody a');
  expect(await orderRows.count()).toBeGreaterThan(0);
  await page.getByLabel('Reason').selectOption('refund:needs_attention');
  expect(await orderRows.count()).toBe(0);
  expect(await row.isVisible()).toBe(true);
  // The tenant filter is the server's: another tenant has none of these.
  await page.getByLabel('Tenant').fill('nobody');
  await page.getByLabel('Tenant').press('Enter');
  await page.getByText('No refund needs attention.').waitFor();
  await page.getByLabel('Tenant').fill('acme');
  await page.getByLabel('Tenant').press('Enter');
  await row.waitFor();

  // Preview first: the provider never saw the key, so the re-drive makes the refund under the same one.
  await page.getByRole('button', { name: refund.refundId }).click();
  expect(await page.locator('#refund-status').textContent()).toBe('needs_attention');
  const confirm = page.getByRole('button', { name: 'Confirm refund re-drive' });
  await page.locator('#refund-redrive-reason').fill('refund provider recovered (console test)');
  expect(await confirm.isDisabled()).toBe(true); // not previewed yet
  await page.getByRole('button', { name: 'Preview refund re-drive' }).click();
  const effect = page.locator('li[data-step="refund"]');
  await effect.waitFor();
  const dk = downstreamKey({ tenantId: 'acme', operationType: 'payment.refund', key: refund.key });
  expect(await effect.textContent()).toMatch(/has no refund under this step's downstream key/);
  expect(await effect.textContent()).toContain(`under the same key (${dk})`);
  // A resolve as succeeded contradicts the provider: the page says so and will not confirm it.
  await page.getByLabel('Refund outcome').selectOption('succeeded');
  await page.locator('#refund-resolve-reason').fill('would be wrong');
  expect(await page.getByRole('button', { name: 'Confirm refund resolve' }).isDisabled()).toBe(true);

  await confirm.click();
  await page.getByText(/Refund re-drive accepted/).waitFor({ timeout: 30_000 });
  const auditRow = page.locator('#refund-panel tr[data-audit-id]');
  expect(await auditRow.count()).toBe(1);
  const written = await auditRow.locator('td').allTextContents();
  expect([written[2], written[3], written[4], written[6]]).toEqual([
    operatorName,
    'operator_token',
    'redrive',
    refund.workflowId,
  ]);
  await until(`refund ${refund.refundId} succeeded`, () => refundStatus(refund.refundId), {
    done: (s) => s === 'succeeded',
    timeoutMs: 60_000,
    intervalMs: 200,
  });
  const made = (await (
    await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${encodeURIComponent(refund.orderId)}`)
  ).json()) as { data: { idempotency_key: string }[] };
  expect(made.data.map((r) => r.idempotency_key)).toEqual([dk]); // made once, under the step's key

  // The Audit page: everything, then narrowed by the server to this refund's re-drive result.
  await page.getByRole('link', { name: 'Audit' }).click();
  const entries = page.locator('table.audit tbody tr[data-audit-id]');
  // Polled, not read once: the page may replace its rows between the first one appearing and a count.
  await expect.poll(() => entries.count()).toBeGreaterThan(2); // the other tests' actions, and this refund's intent and result
  await page.getByLabel('Actor').fill(operatorName);
  await page.getByLabel('Action').selectOption('redrive');
  await page.getByLabel(/Reason, key or workflow contains/).fill(refund.refundId.toUpperCase()); // case ignored
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByText(/^1 entry$/).waitFor();
  expect(await entries.count()).toBe(1);
  const only = await entries.first().locator('td').allTextContents();
  expect(only[0]).toBe(written[0]); // the very row the action showed
  await shoot(page, 'console-audit-filtered');
  expect(problems).toEqual([]);
  await page.context().close();
});

it('every page passes axe-core, and the Audit page lists actions with their actors', async () => {
  const { page } = await openConsole(browser, base, { axe: true });
  await axe(page, 'sign in');
  await signIn(page, operatorToken);
  await page.getByRole('heading', { name: 'Attention' }).waitFor();
  await page.getByText(/refreshes every/).waitFor();
  await axe(page, 'attention');
  await page.getByRole('link', { name: 'Audit' }).click();
  await page.locator('tr[data-audit-id]').first().waitFor({ timeout: 30_000 });
  expect(await page.locator('table.audit').textContent()).toContain(operatorName);
  await shoot(page, 'console-audit');
  await axe(page, 'audit');
  const { rows } = await stack.pool.query<{ tenant_id: string; order_id: string }>(
    `select tenant_id, id as order_id from orders where status = 'completed' limit 1`,
  );
  await page.goto(`${base}/console#/order/${rows[0]!.tenant_id}/${rows[0]!.order_id}`);
  await page.getByRole('heading', { name: 'Steps' }).waitFor();
  await axe(page, 'order');
  await page.context().close();
});
