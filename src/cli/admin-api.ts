/**
 * The ops CLI over the admin API (`onceflow ops … --api-url <url>`): the same
 * recovery actions through the API's /admin routes, so an operator needs an
 * operator token and the API's address, never database access. The API
 * verifies the token and records its operator's name as the audit actor.
 */
import { readFileSync } from 'node:fs';
import { OpsError } from '../operator/errors.ts';

type OpsErrorCode = OpsError['code'];

/** Problem types the admin routes send, mapped to the CLI's error codes (docs/OPERATIONS.md). */
const CODES: Record<string, OpsErrorCode> = {
  'not-found': 'not_found',
  'operation-state': 'invalid_state',
  'operation-in-progress': 'in_progress',
  'invalid-request': 'invalid_input',
  'admin-unauthorized': 'invalid_input',
  unavailable: 'unavailable',
};

export interface AdminApi {
  get(path: string, query?: Record<string, string | number | undefined>): Promise<unknown>;
  post(path: string, body: Record<string, unknown>): Promise<unknown>;
}

/** The operator token: ONCEFLOW_OPERATOR_TOKEN, or the first line of --token-file. */
export function operatorToken(tokenFile: string | undefined, env = process.env): string {
  if (tokenFile) {
    let text: string;
    try {
      text = readFileSync(tokenFile, 'utf8');
    } catch (err) {
      throw new OpsError('invalid_input', `--token-file ${tokenFile}: ${(err as Error).message}`);
    }
    const token = text.split('\n')[0]!.trim();
    if (token === '') throw new OpsError('invalid_input', `--token-file ${tokenFile} is empty`);
    return token;
  }
  const token = env.ONCEFLOW_OPERATOR_TOKEN?.trim();
  if (!token) {
    throw new OpsError(
      'invalid_input',
      '--api-url needs an operator token: set ONCEFLOW_OPERATOR_TOKEN or pass --token-file <path> ' +
        '(an operator with database access makes one with: onceflow ops operator add <name>)',
    );
  }
  return token;
}

export function adminApi(baseUrl: string, token: string, timeoutMs = 30_000): AdminApi {
  let base: URL;
  try {
    base = new URL(baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`);
  } catch {
    throw new OpsError('invalid_input', `--api-url ${JSON.stringify(baseUrl)} is not a URL`);
  }
  async function call(method: 'GET' | 'POST', path: string, init: { query?: object; body?: object }) {
    const url = new URL(path.replace(/^\//, ''), base);
    for (const [k, v] of Object.entries(init.query ?? {}))
      if (v !== undefined && v !== '') url.searchParams.set(k, String(v));
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json, application/problem+json',
          ...(init.body ? { 'content-type': 'application/json' } : {}),
        },
        ...(init.body ? { body: JSON.stringify(init.body) } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      throw new OpsError('unavailable', `the admin API at ${base.origin} did not answer (${cause})`);
    }
    const text = await res.text();
    let body: unknown;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {
      throw new OpsError(
        'unavailable',
        `the admin API at ${base.origin} answered ${res.status} with something that is not JSON; is --api-url the onceflow API?`,
      );
    }
    if (res.ok) return body;
    const problem = (body ?? {}) as { type?: string; title?: string; detail?: string };
    const kind = problem.type?.split('/').pop() ?? '';
    const code = CODES[kind] ?? (res.status >= 500 ? 'unavailable' : 'invalid_input');
    throw new OpsError(code, `${res.status} ${problem.title ?? res.statusText}: ${problem.detail ?? text}`);
  }
  return {
    get: (path, query) => call('GET', path, { query: query ?? {} }),
    post: (path, body) => call('POST', path, { body }),
  };
}
