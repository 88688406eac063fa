/** What loadConfig and the variable readers refuse (test/config). */
import { expect } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

/** The message of the ConfigError `read` throws; fails on any other error, and when it throws none. */
export function configRefusal(read: () => unknown): string {
  try {
    read();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

/** The message of the ConfigError `loadConfig(env)` throws. */
export const refusedConfig = (env: NodeJS.ProcessEnv): string => configRefusal(() => loadConfig(env));
