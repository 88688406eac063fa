/**
 * What the configuration refuses when the API may be reachable from other hosts: whether it is
 * exposed, the published local-only credentials, and how weak an explicit credential may be. Read by
 * `loadConfig` (src/config.ts), which defines each credential on the `Config` it returns.
 */

import { ConfigError } from './error.ts';

/** True for addresses only this machine can reach; everything else is "exposed". */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127(\.\d{1,3}){3}$/.test(h);
}

export interface Exposure {
  exposed: boolean;
  /** One sentence per sign, for refusal messages; empty when not exposed. */
  reasons: string[];
}

/**
 * A loopback bind does not prove only this machine reaches the API (a proxy or tunnel may forward
 * to it), so any sign counts: a non-loopback bind, a configured proxy, or NODE_ENV=production.
 */
export function exposureOf(s: {
  bindHost: string;
  trustProxy: readonly string[];
  nodeEnv?: string;
}): Exposure {
  const reasons: string[] = [];
  if (!isLoopbackHost(s.bindHost)) reasons.push(`BIND_HOST=${s.bindHost} is not a loopback address`);
  if (s.trustProxy.length > 0) reasons.push('API_TRUST_PROXY is set: the API is reachable through a proxy');
  if (s.nodeEnv === 'production') reasons.push('NODE_ENV=production');
  return { exposed: reasons.length > 0, reasons };
}

/**
 * A conservative entropy estimate in bits: the least of the character-class, repeating-unit and
 * Shannon estimates. It only refuses what is obviously weak.
 */
export function estimateEntropyBits(secret: string): number {
  const chars = [...secret];
  if (chars.length === 0) return 0;
  let pool = 0;
  if (chars.some((c) => c >= 'a' && c <= 'z')) pool += 26;
  if (chars.some((c) => c >= 'A' && c <= 'Z')) pool += 26;
  if (chars.some((c) => c >= '0' && c <= '9')) pool += 10;
  if (chars.some((c) => !/[a-zA-Z0-9]/.test(c))) pool += 33;
  const perChar = Math.log2(pool);
  let period = chars.length;
  for (let p = 1; p < chars.length; p++) {
    if (chars.every((c, i) => i < p || c === chars[i - p])) {
      period = p;
      break;
    }
  }
  const counts = new Map<string, number>();
  for (const c of chars) counts.set(c, (counts.get(c) ?? 0) + 1);
  let shannon = 0;
  for (const n of counts.values()) shannon -= (n / chars.length) * Math.log2(n / chars.length);
  return Math.min(chars.length * perChar, period * perChar, chars.length * shannon);
}

/** Explicit values of these credentials must carry this much entropy, on any bind. */
const MIN_ENTROPY_BITS: Partial<Record<Credential, number>> = {
  adminToken: 128,
  // One valid key is enough to brute-force a weak tag secret offline.
  apiKeySecret: 128,
};

/**
 * Published local-only credentials: accepted only on loopback, since anyone reaching an exposed port has
 * read them.
 */
export const PUBLISHED_CREDENTIALS = {
  adminToken: {
    env: 'ONCEFLOW_ADMIN_TOKEN',
    localDefault: 'admin_local_dev_token',
    published: ['admin_local_dev_token', 'admin_compose_change_me'],
  },
  webhookSecret: {
    env: 'WEBHOOK_SECRET',
    localDefault: 'whsec_onceflow_local_dev',
    published: ['whsec_onceflow_local_dev', 'whsec_onceflow_compose_change_me'],
  },
  apiKeySecret: {
    env: 'API_KEY_SECRET',
    localDefault: 'apikey_onceflow_local_dev',
    published: ['apikey_onceflow_local_dev'],
  },
} as const;

export type Credential = keyof typeof PUBLISHED_CREDENTIALS;

function refusal(name: Credential, exposure: Exposure, explicitPublished: boolean): string {
  const { env } = PUBLISHED_CREDENTIALS[name];
  return (
    `${env} ${explicitPublished ? 'is set to a published example value' : 'is not set'} while the API ` +
    `may be reachable from other hosts (${exposure.reasons.join('; ')}); the local default is public, ` +
    `so this process refuses to use it. Generate a secret with \`openssl rand -hex 32\` and set ${env} ` +
    `(the same value in every onceflow process).`
  );
}

function weakRefusal(name: Credential, bits: number, minBits: number): string {
  const { env } = PUBLISHED_CREDENTIALS[name];
  return (
    `${env} is too easy to guess: about ${Math.floor(bits)} bits of entropy, and at least ${minBits} bits ` +
    `are required (it is short, uses few kinds of characters, or repeats itself). Generate one with ` +
    `\`openssl rand -hex 32\` and set ${env} (the same value in every onceflow process).`
  );
}

/**
 * A credential, or a property that throws `ConfigError` when read (exposed without a safe value, or
 * too weak): only the processes that use it refuse to start.
 */
export function defineCredential(
  target: object,
  name: Credential,
  env: NodeJS.ProcessEnv,
  exposure: Exposure,
) {
  const spec = PUBLISHED_CREDENTIALS[name];
  const raw = env[spec.env];
  const explicit = raw !== undefined && raw !== '';
  const publishedValue = explicit && (spec.published as readonly string[]).includes(raw);
  const minBits = MIN_ENTROPY_BITS[name];
  // A published value is judged by exposure alone: on loopback it is the local default by another name.
  const bits = explicit && !publishedValue && minBits !== undefined ? estimateEntropyBits(raw) : Infinity;
  const message =
    exposure.exposed && (!explicit || publishedValue)
      ? refusal(name, exposure, publishedValue)
      : minBits !== undefined && bits < minBits
        ? weakRefusal(name, bits, minBits)
        : undefined;
  if (message !== undefined) {
    Object.defineProperty(target, name, {
      enumerable: false,
      get() {
        throw new ConfigError(message);
      },
    });
  } else {
    Object.defineProperty(target, name, { enumerable: true, value: explicit ? raw : spec.localDefault });
  }
}

/** WEBHOOK_SECRET_PREVIOUS: optional; a published value is refused as the current one's would be. */
export function definePreviousWebhookSecret(target: object, env: NodeJS.ProcessEnv, exposure: Exposure) {
  const raw = env.WEBHOOK_SECRET_PREVIOUS;
  const value = raw === undefined || raw === '' ? null : raw;
  const published = PUBLISHED_CREDENTIALS.webhookSecret.published as readonly string[];
  if (value !== null && exposure.exposed && published.includes(value)) {
    const message =
      `WEBHOOK_SECRET_PREVIOUS is set to a published example value while the API may be reachable from ` +
      `other hosts (${exposure.reasons.join('; ')}); anyone could sign webhooks with it. Unset it, or set ` +
      `it to the secret being retired.`;
    Object.defineProperty(target, 'webhookSecretPrevious', {
      enumerable: false,
      get() {
        throw new ConfigError(message);
      },
    });
  } else {
    Object.defineProperty(target, 'webhookSecretPrevious', { enumerable: true, value });
  }
}
