/** Starts a sandbox on a port: used by the composition root (main.ts) and by tests. */
import type { AddressInfo } from 'node:net';
import { PortInUseError } from '../../src/process/ports.ts';
import { buildSandboxApp, type SandboxApp, type SandboxDeps } from './app.ts';

export interface RunningSandbox {
  app: SandboxApp;
  /** e.g. http://127.0.0.1:4010 */
  url: string;
  port: number;
  /** Stops accepting requests, stops the webhook dispatcher. Does not end the pool (the caller owns it). */
  close(): Promise<void>;
}

export async function startSandbox(
  opts: SandboxDeps & { port: number; host?: string; dispatch?: boolean },
): Promise<RunningSandbox> {
  const { port, host = '127.0.0.1', dispatch = true, ...deps } = opts;
  const app = buildSandboxApp(deps);
  try {
    await app.listen({ port, host });
  } catch (err) {
    await app.close().catch(() => undefined);
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new PortInUseError(port, 'sandbox');
    throw err;
  }
  const bound = (app.server.address() as AddressInfo).port;
  if (dispatch) app.webhookDispatcher.start();
  return { app, url: `http://${host}:${bound}`, port: bound, close: () => app.close() };
}
