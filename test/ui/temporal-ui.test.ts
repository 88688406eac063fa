/**
 * A browser check of the Temporal UI (headless Debian Chromium driven by
 * playwright-core): a finished order's history shows the charge and receipt
 * activities and every status write (local activities, shown as markers with
 * their summaries) with its operation key, and filtering by the OrderStatus
 * search attribute finds it. Screenshots are kept in test-results/; with
 * UPDATE_DOCS_IMAGES=1 the history's first screen is also written to
 * docs/images/temporal-ui-history.png, the picture the README shows.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { inject } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { stepKeys } from '../../src/orders/model.ts';
import { launchChromium } from '../support/chromium.ts';

const artifacts = path.resolve(import.meta.dirname, '../../test-results');
const docsImages = path.resolve(import.meta.dirname, '../../docs/images');
let stack: OrderStack;
let browser: Browser;

beforeAll(async () => {
  stack = await startOrderStack();
  browser = await launchChromium();
  fs.mkdirSync(artifacts, { recursive: true });
});
afterAll(async () => {
  await browser?.close();
  await stack?.close();
});

it('shows a finished order with its steps and keys, and finds it by OrderStatus', async () => {
  const { workflowId, handle } = await stack.startOrder();
  expect((await handle.result()).status).toBe('completed');
  const { runId } = await handle.describe();
  const ui = inject('temporalUiUrl');
  const page = await browser.newPage({ viewport: { width: 1400, height: 2000 } });
  try {
    // The history, in the UI's compact event view with activity summaries.
    await page.goto(`${ui}/namespaces/default/workflows/${encodeURIComponent(workflowId)}/${runId}/history`, {
      waitUntil: 'networkidle',
    });
    const chargeKey = stepKeys.charge(workflowId);
    const receiptKey = stepKeys.receipt(workflowId);
    await page.getByText(chargeKey, { exact: false }).first().waitFor({ timeout: 30_000 });
    const text = await page.locator('body').innerText();
    await page.screenshot({ path: path.join(artifacts, 'temporal-ui-history.png'), fullPage: true });
    if (process.env.UPDATE_DOCS_IMAGES === '1') {
      // The README's picture: what a reader sees first on this page, at a laptop's size.
      await page.setViewportSize({ width: 1400, height: 900 });
      await page.screenshot({ path: path.join(docsImages, 'temporal-ui-history.png') });
    }
    for (const expected of [
      'chargePayment',
      'sendReceipt',
      chargeKey,
      receiptKey,
      // The UI names the marker events 'Local Activity', with the activity type and summary.
      'Local Activity',
      // The charge and the receipt write the statuses around them (STEPS_CARRY_STATUS): their
      // markers' summaries name each status and its key too.
      ...(['payment_pending', 'paid', 'completed'] as const).map(
        (s) => `status -> ${s} (key ${stepKeys.status(workflowId, s)})`,
      ),
    ]) {
      expect(text, `history page should show ${expected}`).toContain(expected);
    }

    // The workflow list filtered by the OrderStatus search attribute.
    const query = `OrderStatus = "completed" AND WorkflowId = "${workflowId}"`;
    await page.goto(`${ui}/namespaces/default/workflows?query=${encodeURIComponent(query)}`, {
      waitUntil: 'networkidle',
    });
    await page.getByText(workflowId).first().waitFor({ timeout: 30_000 });
    await page.screenshot({ path: path.join(artifacts, 'temporal-ui-filter.png'), fullPage: true });
    expect(await page.locator('body').innerText()).toContain(workflowId);
  } finally {
    await page.close();
  }
});
