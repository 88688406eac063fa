/** The processes' one reader of the environment. Every setting has a local default. */
export interface Config {
  databaseUrl: string;
  temporalAddress: string;
  taskQueue: string;
  bankUrl: string;
  /** The port `serve-bank` listens on. */
  bankPort: number;
}

export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const bankPort = Number(env.BANK_PORT ?? 4400);
  if (!Number.isInteger(bankPort) || bankPort < 0 || bankPort > 65535) {
    throw new Error(`BANK_PORT must be a port number, got ${env.BANK_PORT}`);
  }
  return {
    databaseUrl: env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/money_transfer',
    temporalAddress: env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233',
    taskQueue: env.TASK_QUEUE ?? 'money-transfer',
    bankUrl: env.BANK_URL ?? `http://127.0.0.1:${bankPort}`,
    bankPort,
  };
}
