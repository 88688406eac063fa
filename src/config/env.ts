/**
 * Readers of one environment variable each, for `loadConfig` (src/config.ts): a value that does not
 * parse is a `ConfigError` naming the variable, never a silent fallback.
 */

import { ConfigError } from './error.ts';

/** An integer variable: unset or empty is `fallback`; otherwise a safe integer that `ok` accepts. */
function integer(
  env: NodeJS.ProcessEnv,
  name: string,
  fallback: number,
  ok: (n: number) => boolean,
  what: string,
): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || !ok(n))
    throw new ConfigError(`${name} must be ${what}, got ${JSON.stringify(raw)}`);
  return n;
}

export const positiveInt = (env: NodeJS.ProcessEnv, name: string, fallback: number): number =>
  integer(env, name, fallback, (n) => n > 0, 'a positive integer');

export const nonNegativeInt = (env: NodeJS.ProcessEnv, name: string, fallback: number): number =>
  integer(env, name, fallback, (n) => n >= 0, 'a non-negative integer');

export const duration = (env: NodeJS.ProcessEnv, name: string, fallback: number): number =>
  integer(env, name, fallback, (n) => n > 0, 'a positive number of milliseconds');

export const port = (env: NodeJS.ProcessEnv, name: string, fallback: number): number =>
  integer(env, name, fallback, (n) => n > 0 && n <= 65535, 'a port number (1-65535)');

export function onOff(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (['on', 'true', '1'].includes(raw)) return true;
  if (['off', 'false', '0'].includes(raw)) return false;
  throw new ConfigError(`${name} must be on or off, got ${JSON.stringify(raw)}`);
}

export function oneOf<T extends string>(
  env: NodeJS.ProcessEnv,
  name: string,
  values: readonly T[],
  fallback: T,
): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(values as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${values.join(', ')}; got ${JSON.stringify(raw)}`);
  }
  return raw as T;
}
