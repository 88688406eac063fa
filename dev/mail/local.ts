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

/**
 * For a client of a running stack (`npm run demo`): the local mailbox when the
 * stack sends receipts over SMTP. Its own EMAIL_PROVIDER=smtp says so; when
 * EMAIL_PROVIDER is not set at all, the stack is asked instead: `npm start`
 * runs the local SMTP server only with EMAIL_PROVIDER=smtp, so a mailbox
 * answering on MAIL_HTTP_PORT means the receipts are there, not at the sandbox.
 */
export async function runningLocalMail(
  config: Config,
  env: NodeJS.ProcessEnv,
): Promise<{ mailboxUrl: string } | null> {
  const configured = localMail(config, env);
  if (configured || (env.EMAIL_PROVIDER ?? '').trim() !== '') return configured;
  const mailboxUrl = `http://127.0.0.1:${env.MAIL_HTTP_PORT || 8025}`;
  try {
    const res = await fetch(`${mailboxUrl}/messages`, { signal: AbortSignal.timeout(2_000) });
    if (!res.ok) return null;
    const body = (await res.json()) as { data?: unknown };
    return Array.isArray(body.data) ? { mailboxUrl } : null;
  } catch {
    return null; // nothing listens: the sandbox takes the receipts
  }
}
