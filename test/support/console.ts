/**
 * What the console's browser tests share: a page in a context of its own that collects page
 * errors, an axe-core check, and screenshots (test-results/, and docs/images/ with
 * UPDATE_DOCS_IMAGES=1).
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import type { Browser, Page } from 'playwright-core';

const root = path.resolve(import.meta.dirname, '../..');
const artifacts = path.join(root, 'test-results');
const docsImages = path.join(root, 'docs/images');
const AXE = fs.readFileSync(path.join(root, 'node_modules/axe-core/axe.min.js'), 'utf8');

/** The console's sign-in page; CSP violations and page errors land in `problems`, for the test to assert. */
export async function openConsole(
  browser: Browser,
  base: string,
  opts: { axe?: boolean } = {},
): Promise<{ page: Page; problems: string[] }> {
  // axe is injected as a script, which the console's CSP (rightly) blocks: only its own context bypasses it.
  const context = await browser.newContext({
    viewport: { width: 1300, height: 900 },
    bypassCSP: opts.axe === true,
  });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 40[19]/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  await page.goto(`${base}/console`);
  return { page, problems };
}

export async function signIn(page: Page, token: string): Promise<void> {
  await page.getByLabel(/Operator token/).fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

export async function axe(page: Page, what: string): Promise<void> {
  await page.addScriptTag({ content: AXE });
  // A string: it runs in the page (no DOM types in this Node project).
  const violations = (await page.evaluate(
    'axe.run(document).then((r) => r.violations.map((v) => `${v.id} (${v.impact}, ${v.nodes.length} nodes)`))',
  )) as string[];
  expect(violations, `axe on ${what}`).toEqual([]);
}

export async function shoot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: true });
  if (process.env.UPDATE_DOCS_IMAGES === '1')
    await page.screenshot({ path: path.join(docsImages, `${name}.png`) });
}
