/** API_KEY_SECRET is a credential like ONCEFLOW_ADMIN_TOKEN: a published local default, refused when exposed. */
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, requireCredentials } from '../../src/config.ts';

const STRONG = '9f2c4e7a1b3d5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8';

describe('API_KEY_SECRET', () => {
  it('on loopback without a value, is the published local default', () => {
    expect(loadConfig({}).apiKeySecret).toBe('apikey_onceflow_local_dev');
  });

  it.each([
    ['a non-loopback bind', { BIND_HOST: '0.0.0.0' }],
    ['a trusted proxy', { API_TRUST_PROXY: '10.0.0.1' }],
  ])('exposed by %s, refuses the default and the published value', (_name, env) => {
    for (const value of [undefined, 'apikey_onceflow_local_dev']) {
      const config = loadConfig({ ...env, ...(value ? { API_KEY_SECRET: value } : {}) });
      expect(() => config.apiKeySecret).toThrow(ConfigError);
      expect(() => requireCredentials(config, ['apiKeySecret'])).toThrow(
        /API_KEY_SECRET.*openssl rand -hex 32/,
      );
    }
    expect(loadConfig({ ...env, API_KEY_SECRET: STRONG }).apiKeySecret).toBe(STRONG);
  });

  it('an explicit value needs 128 bits of entropy, on any bind', () => {
    expect(() => loadConfig({ API_KEY_SECRET: 'secret123' }).apiKeySecret).toThrow(
      /API_KEY_SECRET.*128 bits/,
    );
  });

  it('API_KEY_ALLOW_UNTAGGED is on by default and takes on/off', () => {
    expect(loadConfig({}).api.apiKeyAllowUntagged).toBe(true);
    expect(loadConfig({ API_KEY_ALLOW_UNTAGGED: 'off' }).api.apiKeyAllowUntagged).toBe(false);
    expect(() => loadConfig({ API_KEY_ALLOW_UNTAGGED: 'maybe' })).toThrow(/API_KEY_ALLOW_UNTAGGED/);
  });
});
