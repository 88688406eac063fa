/**
 * Receipts over SMTP, with `nodemailer`. SMTP has no idempotency and nothing to ask afterwards, so a
 * lost answer stays uncertain; every send of one receipt carries the same `Message-ID`, by which
 * clients collapse duplicates. The declared policy decides (src/steps/receipt.ts); the default,
 * `at_least_once`, because a duplicate receipt costs less than a missing one.
 *
 * Errors:
 *   connection refused, DNS      -> not_sent (definite: nothing left)
 *   an SMTP 4xx reply            -> not_sent (the server refused to take it for now; retry later)
 *   an SMTP 5xx reply, bad login -> rejected (definite; retrying won't help)
 *   timeout, reset, anything else -> uncertain
 */
import { createHash } from 'node:crypto';
import nodemailer from 'nodemailer';
import {
  ProviderError,
  type EmailProvider,
  type Message,
  type MessageRequest,
  type UncertainSendPolicy,
} from './types.ts';
import { notSentCode } from './sandbox.ts';

export interface SmtpProviderOptions {
  /** smtp:// or smtps:// URL, with credentials if the server wants them. */
  url: string;
  /** The From header. */
  from: string;
  /** Connection, greeting and socket inactivity timeout. */
  timeoutMs: number;
  uncertainPolicy: UncertainSendPolicy;
}

/** The domain part of a From address ("Name <a@b.c>" or "a@b.c"), for Message-IDs. */
function fromDomain(from: string): string {
  const m = /@([A-Za-z0-9.-]+)>?\s*$/.exec(from);
  return m?.[1] ?? 'onceflow.invalid';
}

/** The same Message-ID for every send under this key; a hash, so it leaks no tenant or order id. */
export function messageIdFor(downstreamKey: string, from: string): string {
  const digest = createHash('sha256').update(downstreamKey).digest('hex').slice(0, 40);
  return `<receipt.${digest}@${fromDomain(from)}>`;
}

function smtpError(what: string, err: unknown): ProviderError {
  const e = err as {
    code?: unknown;
    responseCode?: unknown;
    command?: unknown;
    cause?: unknown;
    message?: unknown;
  };
  const message = `${what}: ${typeof e?.message === 'string' ? e.message : String(err)}`;
  const notSent = notSentCode(err) ?? notSentCode(e?.cause);
  if (notSent) return new ProviderError('not_sent', message, { code: notSent, cause: err });
  const reply = typeof e?.responseCode === 'number' ? e.responseCode : undefined;
  if (reply !== undefined && reply >= 400 && reply < 500) {
    return new ProviderError('not_sent', message, { code: `smtp_${reply}`, cause: err });
  }
  if ((reply !== undefined && reply >= 500) || e?.code === 'EAUTH' || e?.code === 'EENVELOPE') {
    return new ProviderError('rejected', message, {
      code: reply ? `smtp_${reply}` : String(e.code),
      cause: err,
    });
  }
  const code = e?.code === 'ETIMEDOUT' ? 'timeout' : 'network';
  return new ProviderError('uncertain', message, { code, cause: err });
}

/** ECONNREFUSED from nodemailer arrives as its own error with the socket's code copied on. */
function refusedConnection(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return typeof e?.message === 'string' && /\bECONNREFUSED\b/.test(e.message) && e.code === 'ESOCKET';
}

export function createSmtpEmailProvider(opts: SmtpProviderOptions): EmailProvider {
  const transport = nodemailer.createTransport({
    url: opts.url,
    connectionTimeout: opts.timeoutMs,
    greetingTimeout: opts.timeoutMs,
    socketTimeout: opts.timeoutMs,
  });
  return {
    capabilities: Object.freeze({
      keyWindowMs: null,
      withinWindow: 'none',
      afterWindow: Object.freeze({ kind: 'none' }),
    }),
    uncertainPolicy: opts.uncertainPolicy,

    async sendMessage(req: MessageRequest, idempotencyKey: string): Promise<Message> {
      const what = 'smtp sendMessage';
      const messageId = messageIdFor(idempotencyKey, opts.from);
      try {
        await transport.sendMail({
          from: opts.from,
          to: req.to,
          subject: req.subject,
          text: req.text,
          messageId,
          // Whose receipt this is, for the mailbox and for support (no personal data).
          headers: {
            'X-Onceflow-Order': req.metadata.order_id ?? '',
            'X-Onceflow-Operation': req.metadata.operation_key ?? '',
          },
        });
      } catch (err) {
        if (refusedConnection(err)) {
          throw new ProviderError('not_sent', `${what}: not sent (connection refused)`, {
            code: 'connection_refused',
            cause: err,
          });
        }
        throw smtpError(what, err);
      }
      return {
        id: messageId,
        status: 'sent',
        to: req.to,
        idempotencyKey,
        created: new Date().toISOString(),
      };
    },
  };
}
