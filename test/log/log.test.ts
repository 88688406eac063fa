/**
 * The logger's format, its redaction, and the Temporal SDK adapter: every
 * line is one JSON object, secrets never come out, and the SDK's lines come
 * out in the same format.
 */
import { describe, expect, it } from 'vitest';
import { childLog, configureLogging, createLogger, log, temporalSdkLogger } from '../../src/log.ts';
import { requestIdFor } from '../../src/api/request-log.ts';
import { captureLines } from './capture.ts';

describe('logger', () => {
  it('writes one JSON object per line: time, level name, service, message and fields', () => {
    const out = captureLines();
    configureLogging({ level: 'debug', service: 'unit', destination: out.stream });
    log.info('hello', { n: 1 });
    log.debug('details');
    childLog({ workflowId: 'order/1', operationKey: 'order/1/charge' }).warn('step did not finish');
    const [hello, details, step] = out.lines();
    expect(hello).toMatchObject({ level: 'info', service: 'unit', msg: 'hello', n: 1 });
    expect(new Date(hello!.time as string).toISOString()).toBe(hello!.time);
    expect(details).toMatchObject({ level: 'debug', msg: 'details' });
    expect(step).toMatchObject({
      level: 'warn',
      msg: 'step did not finish',
      workflowId: 'order/1',
      operationKey: 'order/1/charge',
    });
  });

  it('follows the level', () => {
    const out = captureLines();
    configureLogging({ level: 'warn', destination: out.stream });
    log.info('dropped');
    log.error('kept');
    expect(out.lines().map((l) => l.msg)).toEqual(['kept']);
  });

  it('redacts credentials, secrets and signature headers wherever they are logged', () => {
    const out = captureLines();
    const logger = createLogger({ destination: out.stream });
    const secrets = {
      bearer: 'Bearer sk_live_SECRET1',
      apiKey: 'sk_live_SECRET2',
      adminToken: 'admin_SECRET3',
      webhookSecret: 'whsec_SECRET4',
      signature: 't=1,v1=SECRET5',
    };
    logger.info(
      {
        headers: { authorization: secrets.bearer, 'onceflow-signature': secrets.signature, host: 'x' },
        apiKey: secrets.apiKey,
        config: { adminToken: secrets.adminToken, webhookSecret: secrets.webhookSecret },
        req: { headers: { authorization: secrets.bearer } },
      },
      'everything a careless caller might log',
    );
    for (const value of Object.values(secrets)) expect(out.text()).not.toContain(value);
    const [line] = out.lines();
    expect(line).toMatchObject({
      headers: { authorization: '[redacted]', 'onceflow-signature': '[redacted]', host: 'x' },
      apiKey: '[redacted]',
      config: { adminToken: '[redacted]', webhookSecret: '[redacted]' },
    });
  });
});

describe('Temporal SDK logger', () => {
  it('maps SDK levels and metadata onto our JSON lines', () => {
    const out = captureLines();
    const logger = createLogger({ level: 'debug', service: 'worker', destination: out.stream });
    const sdk = temporalSdkLogger(() => logger);
    sdk.info('Worker state changed', { sdkComponent: 'worker', state: 'RUNNING', taskQueue: 'q' });
    sdk.log('WARN', 'Activity failed', { workflowId: 'order/1', error: new Error('boom') });
    sdk.trace('not shown at debug');
    expect(out.lines()).toEqual([
      expect.objectContaining({
        level: 'info',
        service: 'worker',
        component: 'temporal-sdk',
        msg: 'Worker state changed',
        sdkComponent: 'worker',
        state: 'RUNNING',
      }),
      expect.objectContaining({
        level: 'warn',
        msg: 'Activity failed',
        workflowId: 'order/1',
        error: 'boom',
        errorName: 'Error',
      }),
    ]);
  });
});

describe('request IDs', () => {
  const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
  it('take a sane X-Request-Id as is', () => {
    expect(requestIdFor({ 'x-request-id': 'req-42.a:b_c' })).toBe('req-42.a:b_c');
  });
  it('refuse an X-Request-Id that could forge log lines or is too long, and fall back', () => {
    expect(requestIdFor({ 'x-request-id': 'a\nb', traceparent: `00-${trace}-00f067aa0ba902b7-01` })).toBe(
      trace,
    );
    expect(requestIdFor({ 'x-request-id': 'x'.repeat(129) })).toMatch(/^[0-9a-f-]{36}$/);
  });
  it('take the trace ID of a valid traceparent, else a UUID', () => {
    expect(requestIdFor({ traceparent: `00-${trace}-00f067aa0ba902b7-01` })).toBe(trace);
    expect(requestIdFor({ traceparent: `00-${'0'.repeat(32)}-00f067aa0ba902b7-01` })).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-4/,
    );
    expect(requestIdFor({})).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab]/);
  });
});
