/**
 * /docs in a real browser under its Content-Security-Policy: Swagger UI
 * still renders the tenant API, and the browser reports no CSP violation.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../support/chromium.ts';
import { startApi, type TestApi } from './support.ts';

let api: TestApi;
let browser: Browser;
beforeAll(async () => {
  api = await startApi();
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await api?.close();
});

it('Swagger UI renders the tenant API under the CSP, without violations', async () => {
  const page = await browser.newPage();
  const violations: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
  });
  await page.goto(`${api.url}/docs`);
  await page.locator('.swagger-ui .info .title').filter({ hasText: 'onceflow API' }).waitFor();
  await page.locator('.opblock-summary-path', { hasText: '/v1/orders' }).first().waitFor();
  expect(violations).toEqual([]);
  await page.close();
});
