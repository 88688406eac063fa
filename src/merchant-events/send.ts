/**
 * One delivery attempt to a merchant's endpoint: the body, the Standard Webhooks signature, and an
 * HTTP POST that can only reach the addresses the URL policy allows.
 *
 * The policy is checked where the socket connects (the `lookup` hook), not only when the endpoint is
 * registered: a name that later resolves to 169.254.169.254 or 10.0.0.1 is refused then too.
 * Redirects are never followed: a 3xx is a failed attempt like any other non-2xx.
 */
import { randomBytes } from 'node:crypto';
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import ipaddr from 'ipaddr.js';
import { Webhook } from 'standardwebhooks';

/** Any answer after this is no answer: the attempt is retried. */
const DELIVERY_TIMEOUT_MS = 10_000;
const EXCERPT_BYTES = 1024;

export interface UrlPolicy {
  /**
   * Development only: `http` URLs and loopback, private and link-local addresses. Off in
   * production, where only `https` to public addresses is accepted.
   */
  allowPrivate: boolean;
}

export class EndpointRefused extends Error {
  override readonly name = 'EndpointRefused';
}

/** What a public address is not: loopback, private, link-local (cloud metadata), CGNAT, and the rest. */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  return ipaddr.process(address).range() === 'unicast';
}

/** Checks a URL's form (scheme, no credentials) and, when its host is an IP literal, the address. */
export function checkUrlForm(raw: string, policy: UrlPolicy): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new EndpointRefused('The URL is not valid.');
  }
  if (url.protocol !== 'https:' && !(policy.allowPrivate && url.protocol === 'http:'))
    throw new EndpointRefused(
      `Only https URLs are accepted${policy.allowPrivate ? ' (or http in development)' : ''}.`,
    );
  if (url.username || url.password) throw new EndpointRefused('The URL must not carry credentials.');
  if (url.hash) throw new EndpointRefused('The URL must not have a fragment.');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (net.isIP(host) && !policy.allowPrivate && !isPublicAddress(host))
    throw new EndpointRefused(`The address ${host} is not public.`);
  return url;
}

/** The URL's form and every address its name resolves to now (registration time). */
export async function checkEndpointUrl(raw: string, policy: UrlPolicy): Promise<URL> {
  const url = checkUrlForm(raw, policy);
  if (policy.allowPrivate) return url;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (net.isIP(host)) return url;
  let addresses: dns.LookupAddress[];
  try {
    addresses = await dns.promises.lookup(host, { all: true });
  } catch {
    throw new EndpointRefused(`The name ${host} does not resolve.`);
  }
  const bad = addresses.find((a) => !isPublicAddress(a.address));
  if (bad) throw new EndpointRefused(`The name ${host} resolves to ${bad.address}, which is not public.`);
  return url;
}

/** dns.lookup that refuses non-public answers: what the socket actually connects to is checked. */
function guardedLookup(policy: UrlPolicy): net.LookupFunction {
  return (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const list = addresses as unknown as dns.LookupAddress[];
      const bad = policy.allowPrivate ? undefined : list.find((a) => !isPublicAddress(a.address));
      if (bad) {
        return callback(
          Object.assign(new EndpointRefused(`${hostname} resolves to ${bad.address}, which is not public`), {
            code: 'ENDPOINT_REFUSED',
          }),
          '',
          0,
        );
      }
      if ((options as { all?: boolean }).all)
        return (callback as unknown as (e: null, a: unknown) => void)(null, list);
      const first = list[0]!;
      callback(null, first.address, first.family);
    });
  };
}

/** `whsec_` + base64 of 32 random bytes: the Standard Webhooks secret format. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** The `webhook-signature` header: one `v1,<sig>` per secret, space-separated (a rotation signs twice). */
export function signatureHeader(secrets: readonly string[], id: string, at: Date, body: string): string {
  return secrets.map((s) => new Webhook(s).sign(id, at, body)).join(' ');
}

export interface SendRequest {
  url: string;
  eventId: string;
  body: string;
  secrets: readonly string[];
  policy: UrlPolicy;
  timeoutMs?: number;
  /** The attempt's time (`webhook-timestamp`); default now. */
  at?: Date;
}

export interface SendResult {
  /** null: no HTTP answer (refused, reset, timed out). */
  statusCode: number | null;
  ok: boolean;
  latencyMs: number;
  excerpt: string | null;
  error: string | null;
}

/** One POST. Never throws: whatever happened is in the result. */
export async function sendEvent(req: SendRequest): Promise<SendResult> {
  const started = performance.now();
  const at = req.at ?? new Date();
  const done = (r: Omit<SendResult, 'latencyMs' | 'ok'>): SendResult => ({
    ...r,
    ok: r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300,
    latencyMs: performance.now() - started,
  });
  let url: URL;
  try {
    url = checkUrlForm(req.url, req.policy);
  } catch (err) {
    return done({ statusCode: null, excerpt: null, error: (err as Error).message });
  }
  const headers = {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(req.body)),
    'user-agent': 'onceflow-webhooks/1',
    'webhook-id': req.eventId,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': signatureHeader(req.secrets, req.eventId, at, req.body),
  };
  const client = url.protocol === 'https:' ? https : http;
  return new Promise<SendResult>((resolve) => {
    const r = client.request(
      url,
      {
        method: 'POST',
        headers,
        lookup: guardedLookup(req.policy),
        signal: AbortSignal.timeout(req.timeoutMs ?? DELIVERY_TIMEOUT_MS),
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          if (size < EXCERPT_BYTES) chunks.push(c);
          size += c.length;
        });
        res.on('end', () =>
          resolve(
            done({
              statusCode: res.statusCode ?? null,
              excerpt: Buffer.concat(chunks).subarray(0, EXCERPT_BYTES).toString('utf8'),
              error: null,
            }),
          ),
        );
        res.on('error', (err) =>
          resolve(done({ statusCode: res.statusCode ?? null, excerpt: null, error: err.message })),
        );
      },
    );
    r.on('error', (err: Error & { code?: string }) =>
      resolve(
        done({
          statusCode: null,
          excerpt: null,
          error:
            err.name === 'AbortError'
              ? `no answer within ${req.timeoutMs ?? DELIVERY_TIMEOUT_MS} ms`
              : err.message,
        }),
      ),
    );
    r.end(req.body);
  });
}
