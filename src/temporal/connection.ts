/**
 * Temporal connection settings: the address from our config, TLS and API keys through
 * @temporalio/envconfig.
 */
import { loadClientConnectConfig } from '@temporalio/envconfig';
import { isGrpcServiceError, type TLSConfig } from '@temporalio/client';

export interface TemporalConnectionSettings {
  address: string;
  tls?: TLSConfig | boolean;
  apiKey?: string;
}

export function connectionSettings(
  address: string,
  env: NodeJS.ProcessEnv = process.env,
): TemporalConnectionSettings {
  const { connectionOptions } = loadClientConnectConfig({
    overrideEnvVars: Object.fromEntries(
      Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined),
    ),
  });
  const settings: TemporalConnectionSettings = { address };
  if (connectionOptions.tls) settings.tls = connectionOptions.tls;
  if (typeof connectionOptions.apiKey === 'string') settings.apiKey = connectionOptions.apiKey;
  return settings;
}

/** gRPC status codes of a call that got no answer: UNAVAILABLE (14), DEADLINE_EXCEEDED (4). */
const NO_ANSWER = new Set([14, 4]);

/**
 * True when `err` (or an error it wraps, such as the SDK's ServiceError) is a Temporal call that got
 * no answer: the server could not be reached or the call's deadline passed. It may still have run.
 */
export function isTemporalUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (isGrpcServiceError(e) && NO_ANSWER.has(e.code)) return true;
  }
  return false;
}
