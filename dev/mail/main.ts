/**
 * The local SMTP server as a process (`node --import tsx dev/mail/main.ts`),
 * for `npm start` with EMAIL_PROVIDER=smtp and no SMTP_URL: SMTP on SMTP_PORT
 * (default 2525), the mailbox on MAIL_HTTP_PORT (default 8025,
 * http://127.0.0.1:8025/messages). Loopback only.
 */
import { configureLogging, log } from '../../src/log.ts';
import { runProcess, untilAborted } from '../../src/process/run.ts';
import { startMailServer } from './server.ts';

function port(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0 || n > 65535)
    throw new Error(`${name} must be a port number, got ${raw}`);
  return n;
}

await runProcess('mail', async ({ resources, stopping, started }) => {
  configureLogging({ level: 'info', pretty: undefined, service: 'mail' });
  const mail = resources.add(
    'smtp server',
    await startMailServer({ smtpPort: port('SMTP_PORT', 2525), httpPort: port('MAIL_HTTP_PORT', 8025) }),
    (m) => m.close(),
  );
  started();
  log.info('mail server listening', { smtp: mail.smtpUrl, mailbox: `${mail.httpUrl}/messages` });
  await untilAborted(stopping);
});
