/**
 * Temporal connection settings: the address from our config, TLS and API keys through
 * @temporalio/envconfig.
 */
import { loadClientConnectConfig } from '@temporalio/envconfig';
import type { TLSConfig } from '@temporalio/client';

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
