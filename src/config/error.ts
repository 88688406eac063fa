/** What the configuration refuses: `loadConfig` throws it, and so does reading a refused credential. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}
