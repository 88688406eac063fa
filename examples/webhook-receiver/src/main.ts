/**
 * The receiver process: config -> pool -> receiver, closed in reverse order on SIGINT or SIGTERM.
 *
 * - WEBHOOK_SECRET: the endpoint's `whsec_…` secret, as POST /v1/webhook-endpoints answered it
 *   (several, space-separated, while you switch to a rotated one).
 * - DATABASE_URL: where the inbox and the local copies live (default a local `webhook_receiver`).
 * - PORT (default 4500) and HOST (default 127.0.0.1).
 */
import pg from 'pg';
import { startReceiver } from './receiver.js';

const log = (msg: string, fields: Record<string, unknown> = {}) =>
  console.log(JSON.stringify({ msg, ...fields }));

const secrets = (process.env.WEBHOOK_SECRET ?? '').split(/\s+/).filter(Boolean);
if (secrets.length === 0) {
  console.error(
    'Set WEBHOOK_SECRET to the endpoint secret (whsec_…) that POST /v1/webhook-endpoints returned.',
  );
  process.exit(2);
}
const port = Number(process.env.PORT ?? 4500);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  throw new Error(`PORT must be a port number, got ${process.env.PORT}`);
}

const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/webhook_receiver',
  max: 5,
});
// An idle connection's error (a Postgres restart) must not kill the process: the pool replaces it.
pool.on('error', (err) => log('idle database connection failed', { error: err.message }));

const receiver = await startReceiver({ pool, secrets, port, host: process.env.HOST ?? '127.0.0.1', log });
log('receiver listening', { url: receiver.url });

const stop = () => {
  log('receiver stopping');
  void receiver
    .close()
    .then(() => pool.end())
    .then(() => log('receiver stopped'));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
