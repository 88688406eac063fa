/**
 * A local SMTP server for development and tests (the `smtp-server` package):
 * it accepts every message, keeps it in memory, and shows the mailbox over
 * HTTP, so tests count receipts where a customer would see them.
 *
 *   SMTP on `smtpPort` (no auth, no TLS; loopback only)
 *   GET    /messages[?message_id=&to=]   the mailbox, oldest first
 *   DELETE /messages                     empties it
 *   POST   /faults {kind, count?, delayMs?}
 *       - `delay_after_data` (delayMs): keeps the message, then answers only
 *         after delayMs (a client with a shorter timeout never learns it was
 *         delivered: the uncertain case)
 *       - `reject_temporary`: 451 to the message, nothing kept
 *       - `reject_permanent`: 550 to the message, nothing kept
 *   DELETE /faults
 *   GET    /healthz
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerDataStream, type SMTPServerSession } from 'smtp-server';

export interface StoredMail {
  messageId: string | null;
  from: string | null;
  to: string[];
  subject: string | null;
  headers: Record<string, string>;
  text: string;
  receivedAt: string;
}

type FaultKind = 'delay_after_data' | 'reject_temporary' | 'reject_permanent';
interface Fault {
  kind: FaultKind;
  remaining: number;
  delayMs: number;
}

export interface RunningMailServer {
  smtpUrl: string;
  smtpPort: number;
  httpUrl: string;
  messages(): StoredMail[];
  clear(): void;
  clearFaults(): void;
  fault(f: { kind: FaultKind; count?: number; delayMs?: number }): void;
  close(): Promise<void>;
}

/** Unfolds and splits a raw message's header block (RFC 5322), keeping the last of repeated names. */
function parseMail(raw: string, envelopeTo: string[], envelopeFrom: string | null): StoredMail {
  const split = raw.search(/\r?\n\r?\n/);
  const head = split === -1 ? raw : raw.slice(0, split);
  const body = split === -1 ? '' : raw.slice(split).replace(/^\r?\n\r?\n/, '');
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return {
    messageId: headers['message-id'] ?? null,
    from: envelopeFrom,
    to: envelopeTo,
    subject: headers.subject ?? null,
    headers,
    text: body,
    receivedAt: new Date().toISOString(),
  };
}

export async function startMailServer(
  opts: { smtpPort?: number; httpPort?: number; host?: string } = {},
): Promise<RunningMailServer> {
  const host = opts.host ?? '127.0.0.1';
  const mailbox: StoredMail[] = [];
  let faults: Fault[] = [];
  const takeFault = (): Fault | null => {
    const f = faults.find((x) => x.remaining > 0) ?? null;
    if (f) f.remaining--;
    return f;
  };

  const smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: 1024 * 1024,
    onData(stream: SMTPServerDataStream, session: SMTPServerSession, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const fault = takeFault();
        if (fault?.kind === 'reject_temporary') {
          return callback(Object.assign(new Error('Try again later'), { responseCode: 451 }));
        }
        if (fault?.kind === 'reject_permanent') {
          return callback(Object.assign(new Error('Mailbox unavailable'), { responseCode: 550 }));
        }
        const from = session.envelope.mailFrom ? session.envelope.mailFrom.address : null;
        const to = session.envelope.rcptTo.map((r) => r.address);
        mailbox.push(parseMail(Buffer.concat(chunks).toString('utf8'), to, from));
        if (fault?.kind === 'delay_after_data') {
          setTimeout(() => callback(), fault.delayMs).unref();
          return;
        }
        callback();
      });
    },
  });
  smtp.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    smtp.server.once('error', reject);
    smtp.listen(opts.smtpPort ?? 0, host, () => resolve());
  });
  const smtpPort = (smtp.server.address() as AddressInfo).port;

  const api = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://mail');
    const send = (status: number, body: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (url.pathname === '/healthz') return send(200, { ok: true });
    if (url.pathname === '/messages' && req.method === 'GET') {
      const id = url.searchParams.get('message_id');
      const to = url.searchParams.get('to');
      return send(200, {
        data: mailbox.filter((m) => (!id || m.messageId === id) && (!to || m.to.includes(to))),
      });
    }
    if (url.pathname === '/messages' && req.method === 'DELETE') {
      mailbox.length = 0;
      return send(200, { deleted: true });
    }
    if (url.pathname === '/faults' && req.method === 'DELETE') {
      faults = [];
      return send(200, { deleted: true });
    }
    if (url.pathname === '/faults' && req.method === 'POST') {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        try {
          const f = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
          addFault(f as { kind: FaultKind; count?: number; delayMs?: number });
          send(201, { ok: true });
        } catch (err) {
          send(400, { error: (err as Error).message });
        }
      });
      return;
    }
    send(404, { error: `no route ${req.method} ${url.pathname}` });
  });
  await new Promise<void>((resolve) => api.listen(opts.httpPort ?? 0, host, resolve));
  const httpPort = (api.address() as AddressInfo).port;

  function addFault(f: { kind: FaultKind; count?: number; delayMs?: number }) {
    if (!['delay_after_data', 'reject_temporary', 'reject_permanent'].includes(f.kind)) {
      throw new Error('kind must be delay_after_data, reject_temporary or reject_permanent');
    }
    if (f.kind === 'delay_after_data' && !(Number.isInteger(f.delayMs) && (f.delayMs ?? 0) > 0)) {
      throw new Error('delay_after_data needs delayMs > 0');
    }
    faults.push({ kind: f.kind, remaining: f.count ?? 1, delayMs: f.delayMs ?? 0 });
  }

  return {
    smtpUrl: `smtp://${host}:${smtpPort}`,
    smtpPort,
    httpUrl: `http://${host}:${httpPort}`,
    messages: () => [...mailbox],
    clear: () => {
      mailbox.length = 0;
    },
    clearFaults: () => {
      faults = [];
    },
    fault: addFault,
    async close() {
      await new Promise<void>((r) => api.close(() => r()));
      api.closeAllConnections();
      await new Promise<void>((r) => smtp.close(() => r()));
    },
  };
}
