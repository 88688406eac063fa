/**
 * The console's Webhooks page (console/webhooks.js) in a real browser (Debian's Chromium through
 * playwright-core, as test/console/console.test.ts drives it) against the real stack: the API as
 * src/api/main.ts builds it with its outbox relay running, a worker with a short webhook retry
 * window, and a receiver that answers 500 until it is told to answer 200. The delivery ends failed;
 * the page lists the endpoint and the failed delivery with its attempts, previews a redelivery
 * (what, to which URL, for which tenant), confirms it with a reason and shows the audit ID, and the
 * receiver gets the same webhook-id again. The page passes axe-core.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { CONSOLE_CSP } from '../../src/console/routes.ts';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { launchChromium } from '../support/chromium.ts';
import { startAdminApi, startReceiver, type AdminApi, type Receiver } from '../support/webhooks.ts';
import { axe, openConsole, shoot, signIn } from '../support/console.ts';
import { call, newTenant, validOrder } from '../api/support.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';

let stack: OrderStack;
let browser: Browser;
let api: AdminApi;
let receiver: Receiver;
const answer = { status: 500 };
const ids = () => receiver.received.map((r) => r.id);

beforeAll(async () => {
  stack = await startOrderStack({
    webhooks: { allowPrivate: true, firstRetryMs: 200, maxRetryMs: 500, retryWindowMs: 3_000 },
  });
  api = await startAdminApi(stack);
  receiver = await startReceiver(() => answer.status);
  browser = await launchChromium();
});

afterAll(async () => {
  await receiver?.close();
  await browser?.close();
  await api?.close();
  await stack?.close();
});

/** The console, signed in, on its Webhooks page. */
async function openWebhooks(opts: { axe?: boolean } = {}): Promise<{ page: Page; problems: string[] }> {
  const opened = await openConsole(browser, api.url, opts);
  await signIn(opened.page, api.operatorToken);
  await opened.page.getByRole('heading', { name: 'Attention' }).waitFor();
  await opened.page.getByRole('link', { name: 'Webhooks' }).click();
  await opened.page.getByRole('heading', { name: 'Webhooks' }).waitFor();
  return opened;
}

/** Refreshes the page's lists until the delivery's row shows `status`. */
async function rowWithStatus(page: Page, endpointId: string, eventId: string, status: string) {
  const row = page.locator(
    `table.deliveries tbody tr[data-endpoint-id="${endpointId}"][data-event-id="${eventId}"]`,
  );
  await expect
    .poll(
      async () => {
        await page.getByRole('button', { name: 'Refresh' }).click();
        return (await row.count()) === 1 ? row.locator('td.delivery-status').textContent() : null;
      },
      { timeout: 30_000, interval: 500 },
    )
    .toBe(status);
  return row;
}

let tenant: { tenantId: string; key: string };
let endpointId: string;
let eventId: string;

it('serves the Webhooks module under the console CSP', async () => {
  const res = await fetch(`${api.url}/console/webhooks.js`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/javascript/);
  expect(res.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
  const source = await res.text();
  expect(source).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
});

it('a failed delivery: found by its status with its attempts, previewed, redelivered with a reason and audited', async () => {
  tenant = await newTenant(stack.pool, 'hooks');
  const created = await call(api, 'POST', '/v1/webhook-endpoints', {
    key: tenant.key,
    idem: uniq('we'),
    body: { url: receiver.url, events: ['order.completed'] },
  });
  expect(created.status, created.text).toBe(201);
  endpointId = (created.body as { id: string }).id;
  const order = await call(api, 'POST', '/v1/orders', {
    key: tenant.key,
    idem: uniq('o'),
    body: validOrder(),
  });
  expect(order.status, order.text).toBe(202);
  const { id: orderId } = order.body as { id: string };
  const done = await call(api, 'GET', `/v1/orders/${orderId}?wait=30`, { key: tenant.key });
  expect((done.body as { status: string }).status).toBe('completed');
  eventId = await until(
    'the delivery failed',
    async () => {
      const { rows } = await stack.pool.query<{ event_id: string }>(
        `select event_id from webhook_deliveries where endpoint_id = $1 and status = 'failed'`,
        [endpointId],
      );
      return rows[0]?.event_id;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
  const failedAttempts = ids().length;
  expect(failedAttempts).toBeGreaterThanOrEqual(2);
  expect(new Set(ids())).toEqual(new Set([eventId]));

  // First with axe (its context bypasses the CSP to inject it): the lists, the attempts, a preview.
  {
    const { page } = await openWebhooks({ axe: true });
    await page.getByLabel('Status').selectOption('failed');
    await rowWithStatus(page, endpointId, eventId, 'failed');
    await axe(page, 'webhooks');
    await page.getByRole('button', { name: `Attempts of ${eventId} to ${endpointId}` }).click();
    await page.locator('table.attempts tbody tr[data-attempt]').first().waitFor();
    await axe(page, 'webhook delivery attempts');
    await page.getByRole('button', { name: 'Redeliver failed…' }).click();
    await page.locator('table.preview tbody tr[data-event-id]').first().waitFor();
    await axe(page, 'webhook redelivery preview');
    await page.context().close();
  }

  const { page, problems } = await openWebhooks();
  // The endpoint, with its tenant, URL and events (never its secret).
  const epRow = page.locator(`table.endpoints tbody tr[data-endpoint-id="${endpointId}"]`);
  await epRow.waitFor();
  expect(await epRow.locator('td').allTextContents()).toEqual([
    endpointId,
    tenant.tenantId,
    receiver.url,
    'order.completed',
    expect.any(String),
  ]);
  expect(await page.locator('#main').textContent()).not.toContain('whsec_');

  // The failed delivery, by the status filter; a succeeded filter does not show it.
  await page.getByLabel('Status').selectOption('succeeded');
  await page.getByText('No delivery matches.').waitFor();
  await page.getByLabel('Status').selectOption('failed');
  const row = await rowWithStatus(page, endpointId, eventId, 'failed');
  const cells = await row.locator('td').allTextContents();
  expect(cells.slice(0, 8)).toEqual([
    eventId,
    'order.completed',
    tenant.tenantId,
    receiver.url,
    'failed',
    String(failedAttempts),
    'HTTP 500',
    '0',
  ]);

  // Its attempts, on demand: status, latency, the receiver's answer.
  await row.getByRole('button', { name: /^Attempts of/ }).click();
  const attempts = page.locator('table.attempts tbody tr[data-attempt]');
  await attempts.first().waitFor();
  expect(await attempts.count()).toBe(failedAttempts);
  const first = await attempts.first().locator('td').allTextContents();
  expect(first[2]).toBe('500');
  expect(first[3]).toMatch(/^\d+ ms$/);
  expect(first[5]).toBe('receiver down for maintenance');
  expect(await page.locator('#webhook-delivery-status').textContent()).toBe('failed');
  await shoot(page, 'console-webhook-attempts');

  // The preview: what will be sent, to which URL, for which tenant; nothing sent, nothing audited.
  await page.getByRole('button', { name: 'Redeliver this event' }).click();
  const previewRow = page.locator('table.preview tbody tr[data-event-id]');
  await previewRow.waitFor();
  expect(await previewRow.locator('td').allTextContents()).toEqual([
    tenant.tenantId,
    'order.completed',
    eventId,
    receiver.url,
  ]);
  const confirm = page.getByRole('button', { name: 'Confirm redelivery' });
  expect(await confirm.isDisabled()).toBe(true); // no reason yet
  await page.getByLabel(/Redelivery reason/).fill('   ');
  expect(await confirm.isDisabled()).toBe(true); // blank is no reason
  const audited = () =>
    stack.pool.query<{ id: string; actor: string; actor_credential: string; reason: string }>(
      `select id::text as id, actor, actor_credential, reason from audit_log
        where action = 'webhook_redeliver' and tenant_id = $1 order by id`,
      [tenant.tenantId],
    );
  expect((await audited()).rows).toEqual([]);
  expect(ids()).toHaveLength(failedAttempts);
  await shoot(page, 'console-webhook-preview');

  // The receiver is fixed; confirm with a reason.
  answer.status = 200;
  await page.getByLabel(/Redelivery reason/).fill('receiver back after maintenance (console test)');
  await confirm.click();
  const outcome = page.getByText(/Redelivery started for 1 delivery; 1 audit row\(s\) written/);
  await outcome.waitFor({ timeout: 30_000 });
  const shownAudit = await page.locator('ul.redelivered .audit-id').allTextContents();
  const { rows: audit } = await audited();
  expect(audit).toEqual([
    {
      id: shownAudit[0],
      actor: api.operatorName,
      actor_credential: 'operator_token',
      reason: 'receiver back after maintenance (console test)',
    },
  ]);
  expect(await page.locator('ul.redelivered').textContent()).toContain(
    `delivery/${endpointId}/${eventId}/r1`,
  );

  // Delivered: the same webhook-id again, and the page shows it succeeded with its new attempt.
  await until('redelivered', () => ids().length > failedAttempts, { timeoutMs: 30_000 });
  expect(ids().slice(failedAttempts)).toEqual([eventId]);
  await page.getByLabel('Status').selectOption('succeeded');
  const deliveredRow = await rowWithStatus(page, endpointId, eventId, 'succeeded');
  expect((await deliveredRow.locator('td').allTextContents()).slice(6, 8)).toEqual(['HTTP 200', '1']);
  await deliveredRow.getByRole('button', { name: /^Attempts of/ }).click();
  await expect.poll(() => attempts.count()).toBe(failedAttempts + 1);
  expect((await attempts.last().locator('td').allTextContents())[2]).toBe('200');
  expect(await page.locator('#webhook-delivery-status').textContent()).toBe('succeeded');
  await shoot(page, 'console-webhooks');

  // The Audit page lists the action by its name.
  await page.getByRole('link', { name: 'Audit' }).click();
  await page.getByLabel('Action').selectOption('webhook_redeliver');
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByText(/^1 entry$/).waitFor();
  expect(await page.locator('tr[data-audit-id]').first().getAttribute('data-audit-id')).toBe(audit[0]!.id);
  expect(problems).toEqual([]);
  await page.context().close();
});
