/**
 * The operator console (console/ at the package root): three static files
 * served by the API process under /console. It is a page over the admin API
 * and holds no credential of its own: the operator signs in with a named
 * operator token (or ONCEFLOW_ADMIN_TOKEN), which the page keeps in the tab's
 * sessionStorage and sends as `Authorization: Bearer` on every admin call, so
 * every action is authenticated, throttled and audited exactly as the admin
 * API does it, and no cookie exists for a cross-site request to ride on.
 *
 * Served by the API process rather than one of its own: the admin routes are
 * there, so the page and the API share an origin (connect-src 'self', no
 * CORS) and a deployment exposes one port. CONSOLE=off removes the routes.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { PACKAGE_ROOT } from '../paths.ts';

/** Only this project's own files: no inline script or style, no other origin, no framing. */
export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const FILES: Record<string, { file: string; type: string }> = {
  '/console': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/console/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/console/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
  '/console/favicon.svg': { file: 'favicon.svg', type: 'image/svg+xml' },
};

export function registerConsole(app: FastifyInstance): void {
  const dir = path.join(PACKAGE_ROOT, 'console');
  for (const [url, { file, type }] of Object.entries(FILES)) {
    // Read once at start-up: a missing file fails the start, not the first operator.
    const body = fs.readFileSync(path.join(dir, file));
    app.get(url, { schema: { hide: true } }, (_request, reply) =>
      reply
        .header('content-type', type)
        .header('content-security-policy', CONSOLE_CSP)
        .header('cache-control', 'no-store')
        .send(body),
    );
  }
  app.get('/console/', { schema: { hide: true } }, (_request, reply) => reply.redirect('/console', 308));
}
