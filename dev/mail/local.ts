/**
 * Whether `npm start` (and the chaos stack) run the local SMTP server: with
 * EMAIL_PROVIDER=smtp and no SMTP_URL, receipts go to it (dev/mail/main.ts),
 * and its mailbox is on MAIL_HTTP_PORT (default 8025).
 */
import type { Config } from '../../src/config.ts';

export function localMail(config: Config, env: NodeJS.ProcessEnv): { mailboxUrl: string } | null {
  if (config.providers.email !== 'smtp' || (env.SMTP_URL ?? '').trim() !== '') return null;
  return { mailboxUrl: `http://127.0.0.1:${env.MAIL_HTTP_PORT || 8025}` };
}
