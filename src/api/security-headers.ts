/**
 * Browser hardening headers on every response: JSON should never be rendered, framed or sniffed;
 * Swagger UI at /docs gets its own CSP. A few fixed headers don't need @fastify/helmet.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';

const COMMON: Record<string, string> = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'origin-agent-cluster': '?1',
  'x-dns-prefetch-control': 'off',
  'x-download-options': 'noopen',
  'x-permitted-cross-domain-policies': 'none',
  // Browsers honour it only over HTTPS, i.e. behind the TLS terminator a deployment puts in front.
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
};

/** JSON responses: nothing may load, run or frame. */
const API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export function securityHeaders(
  _request: FastifyRequest,
  reply: FastifyReply,
  payload: unknown,
  done: (err: null, payload: unknown) => void,
): void {
  for (const [name, value] of Object.entries(COMMON)) void reply.header(name, value);
  // Swagger UI's routes set their own (see docsCsp); a hook of theirs runs after this one.
  if (!reply.hasHeader('content-security-policy')) void reply.header('content-security-policy', API_CSP);
  done(null, payload);
}

/** Tightens swagger-ui's CSP; no `upgrade-insecure-requests`, which would break a plain-HTTP local run. */
export function docsCsp(header: string | string[] | number): string {
  return (
    String(header)
      .replace("frame-ancestors 'self'", "frame-ancestors 'none'")
      .replace(' validator.swagger.io', '')
      .replace(/font-src 'self' https: data:/, "font-src 'self' data:")
      // Swagger UI sets inline styles at run time, which hashes can't cover; styles can't run script.
      .replace(/style-src [^;]*/, "style-src 'self' 'unsafe-inline'")
      .replace(/\s*upgrade-insecure-requests;?/, '')
      .trim()
      .concat(" form-action 'self';")
  );
}
