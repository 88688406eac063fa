/**
 * The operator console: static files under /console over the admin API. The token lives in the
 * tab's sessionStorage and goes as a Bearer header, so every action is audited as the API's and no
 * cookie exists for a cross-site request to ride on. Same origin as the admin API: no CORS.
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
  '/console/webhooks.js': { file: 'webhooks.js', type: 'text/javascript; charset=utf-8' },
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
