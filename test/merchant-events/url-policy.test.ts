/**
 * The endpoint URL policy (issue 46): in production only https to public addresses, checked on the
 * URL, on its name's addresses at registration, and again where the socket connects.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import {
  checkEndpointUrl,
  checkUrlForm,
  EndpointRefused,
  isPublicAddress,
  newSigningSecret,
  sendEvent,
  signatureHeader,
} from '../../src/merchant-events/send.ts';

const production = { allowPrivate: false };
const development = { allowPrivate: true };

describe('endpoint URL policy', () => {
  it.each([
    '127.0.0.1',
    '10.0.0.1',
    '172.16.5.4',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '::1',
    'fd00::1',
    'fe80::1',
    '::ffff:127.0.0.1',
    'not-an-ip',
  ])('%s is not public', (a) => expect(isPublicAddress(a)).toBe(false));

  it.each(['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111'])('%s is public', (a) =>
    expect(isPublicAddress(a)).toBe(true),
  );

  it.each([
    ['http://example.com/hook', /Only https/],
    ['https://user:pw@example.com/hook', /credentials/],
    ['https://169.254.169.254/latest/meta-data', /not public/],
    ['https://[::1]/hook', /not public/],
    ['https://10.1.2.3/hook', /not public/],
    ['https://example.com/hook#x', /fragment/],
    ['not a url', /not valid/],
  ])('production refuses %s', (url, why) => {
    expect(() => checkUrlForm(url, production)).toThrow(why);
  });

  it('development allows http to loopback; never another scheme', () => {
    expect(checkUrlForm('http://127.0.0.1:8080/hook', development).port).toBe('8080');
    expect(() => checkUrlForm('ftp://127.0.0.1/hook', development)).toThrow(EndpointRefused);
  });

  it('a name that resolves to loopback is refused at registration', async () => {
    await expect(checkEndpointUrl('https://localhost/hook', production)).rejects.toThrow(
      /resolves to .* not public/,
    );
  });
});

describe('sendEvent', () => {
  let server: http.Server;
  let port = 0;
  let hits = 0;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      hits++;
      req.resume();
      req.on('end', () => res.writeHead(200).end('ok'));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('refuses, where it connects, a name that resolves to a private address in production', async () => {
    const before = hits;
    // https is allowed by form; the name's address is what the lookup refuses.
    const res = await sendEvent({
      url: `https://localhost:${port}/hook`,
      eventId: 'evt_0',
      body: '{}',
      secrets: [newSigningSecret()],
      policy: production,
    });
    expect(res.ok).toBe(false);
    expect(res.statusCode).toBeNull();
    expect(res.error).toMatch(/not public/);
    expect(hits).toBe(before);
  });

  it('signs the Standard Webhooks way and reports the answer', async () => {
    const secret = newSigningSecret();
    const res = await sendEvent({
      url: `http://localhost:${port}/hook`,
      eventId: 'evt_1',
      body: '{"a":1}',
      secrets: [secret],
      policy: development,
    });
    expect(res).toMatchObject({ ok: true, statusCode: 200, excerpt: 'ok', error: null });
    const at = new Date();
    const sig = signatureHeader([secret], 'evt_1', at, '{"a":1}');
    expect(
      new Webhook(secret).verify('{"a":1}', {
        'webhook-id': 'evt_1',
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': sig,
      }),
    ).toEqual({ a: 1 });
  });

  it('no answer within the timeout is a failed attempt, not a hang', async () => {
    const silent = http.createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const res = await sendEvent({
        url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/`,
        eventId: 'evt_2',
        body: '{}',
        secrets: [newSigningSecret()],
        policy: development,
        timeoutMs: 300,
      });
      expect(res).toMatchObject({ ok: false, statusCode: null, error: 'no answer within 300 ms' });
    } finally {
      silent.closeAllConnections();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });
});
