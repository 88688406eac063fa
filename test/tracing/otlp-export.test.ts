/**
 * Export switch (src/tracing): a real process with OTEL_EXPORTER_OTLP_ENDPOINT
 * sends its spans to <endpoint>/v1/traces as OTLP protobuf (flushed on
 * SIGTERM); without it nothing is registered and spans don't record.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { context, trace } from '@opentelemetry/api';
import { freePort } from '../../src/process/ports.ts';
import { startTracing, traceCarrier, tracingActive } from '../../src/tracing/index.ts';
import { testDatabaseUrl } from '../support/env.ts';
import { killAll, spawnEntry, waitHttpOk, type Proc } from '../support/processes.ts';

interface Received {
  method: string;
  url: string;
  contentType: string;
  body: Buffer;
}

describe('OTLP export', () => {
  const procs: Proc[] = [];
  let collector: http.Server | undefined;
  afterAll(async () => {
    killAll(procs);
    await new Promise((r) => (collector ? collector.close(r) : r(undefined)));
  });

  it('a process with OTEL_EXPORTER_OTLP_ENDPOINT exports its server spans there, as protobuf', async () => {
    const received: Received[] = [];
    collector = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({
          method: req.method ?? '',
          url: req.url ?? '',
          contentType: String(req.headers['content-type']),
          body: Buffer.concat(chunks),
        });
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((r) => collector!.listen(0, '127.0.0.1', r));
    const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;

    const port = await freePort();
    const sandbox = spawnEntry('sandbox', 'dev/sandbox/main.ts', {
      DATABASE_URL: testDatabaseUrl(),
      SANDBOX_PORT: String(port),
      LOG_LEVEL: 'warn',
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    });
    procs.push(sandbox);
    await waitHttpOk(`http://127.0.0.1:${port}/healthz`, sandbox);
    const traceId = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, {
      headers: { traceparent: `00-${traceId}-1112131415161718-01` },
    });
    expect(res.ok).toBe(true);
    // SIGTERM closes the app and flushes the batch before the process exits.
    sandbox.child.kill('SIGTERM');
    expect((await sandbox.exited).code).toBe(0);

    const exports = received.filter((r) => r.method === 'POST' && r.url === '/v1/traces');
    expect(exports.length).toBeGreaterThan(0);
    expect(exports.every((r) => r.contentType === 'application/x-protobuf')).toBe(true);
    const body = Buffer.concat(exports.map((r) => r.body));
    expect(body.includes(Buffer.from(traceId, 'hex'))).toBe(true); // the incoming traceparent was continued
    expect(body.includes(Buffer.from('onceflow-sandbox'))).toBe(true); // service.name
    expect(body.includes(Buffer.from('GET /healthz'))).toBe(true);
  });

  it('without an endpoint nothing is registered: spans are no-ops and no context is carried', async () => {
    const tracing = await startTracing({ otlpEndpoint: undefined }, 'api');
    expect(tracing.enabled).toBe(false);
    expect(tracingActive()).toBe(false);
    expect(tracing.clientInterceptors).toEqual({});
    expect(tracing.worker.interceptors).toBeUndefined();
    const span = trace.getTracer('probe').startSpan('probe');
    expect(span.isRecording()).toBe(false);
    expect(traceCarrier(trace.setSpan(context.active(), span))).toBeNull();
    span.end();
    await tracing.shutdown();
  });
});
