/**
 * One order is one trace (src/tracing, docs/OPERATIONS.md "Following one order"): the
 * POST that accepts it, the outbox start, the workflow, each activity, each
 * provider HTTP call (client and sandbox server spans) and the webhook that
 * settles it, linked by parent/child spans. Everything is real (API, outbox
 * relay, Temporal dev server, worker with the pre-built bundle, sandbox and
 * its webhook delivery); only the exporter is an in-memory one.
 *
 * The workflow is started by a relay pass outside any request, after the
 * POST returned: the trace must continue through the context stored with
 * the start intent, not through whatever context happens to be active.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { Client, Connection } from '@temporalio/client';
import type { NativeConnection, Worker } from '@temporalio/worker';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { SpanKind } from '@opentelemetry/api';
import { buildApiApp } from '../../src/api/app.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { OutboxRelay } from '../../src/api/outbox.ts';
import { insertApiKey, insertTenant } from '../../src/tenants/sql.ts';
import { loadConfig } from '../../src/config.ts';
import type { Pool } from '../../src/db/index.ts';
import { Ledger } from 'onceflow';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { startSandbox, type RunningSandbox } from '../../dev/sandbox/server.ts';
import { startTracing, type Tracing } from '../../src/tracing/index.ts';
import { configureLogging } from '../../src/log.ts';
import { captureLines } from '../log/capture.ts';
import { createWorker } from '../../src/worker/worker.ts';
import {
  nativeConnection,
  ownDatabase,
  temporalAddress,
  testPool,
  uniq,
  tracedWorkflowBundlePath,
} from '../support/env.ts';
import { validOrder } from '../api/support.ts';

const WEBHOOK_SECRET = 'whsec_test_traces';

describe('tracing: one order, one trace', () => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let db: Awaited<ReturnType<typeof ownDatabase>>;
  let pool: Pool;
  let app: FastifyInstance;
  let apiUrl: string;
  let requestRelay: OutboxRelay;
  let laterRelay: OutboxRelay;
  let connection: Connection;
  let sandbox: RunningSandbox;
  let workerConnection: NativeConnection;
  let worker: Worker;
  let running: Promise<void>;
  let apiKey: string;

  // Every log line of this file's process, to check that lines inside the trace name it.
  const logs = captureLines();

  beforeAll(async () => {
    configureLogging({ destination: logs.stream, level: 'info', service: 'api' });
    // First: the HTTP apps install their server-span hooks only while tracing is active.
    tracing = await startTracing({ otlpEndpoint: undefined }, 'api', {
      spanProcessor: new SimpleSpanProcessor(exporter),
    });
    // A database of its own: the relay starts every due row of its database, and only ours may be there.
    db = await ownDatabase('traces');
    pool = testPool(20, db.url);
    const taskQueue = uniq('traces');
    const config = loadConfig({
      DATABASE_URL: db.url,
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: taskQueue,
      WEBHOOK_SECRET,
    });
    const tenantId = uniq('tr').toLowerCase();
    apiKey = `sk_test_${uniq('k')}`;
    await insertTenant(pool, { id: tenantId, name: tenantId });
    await insertApiKey(pool, { keyHash: hashApiKey(apiKey), tenantId, label: 'test' });

    connection = await Connection.connect({ address: temporalAddress() });
    const client = new Client({ connection, interceptors: tracing.clientInterceptors });
    // The API's own relay starts nothing: the start is left to a later pass (laterRelay) outside the request.
    requestRelay = new OutboxRelay({ pool, temporal: client, enabled: false });
    laterRelay = new OutboxRelay({ pool, temporal: client, enabled: true });
    const ledger = new Ledger(pool);
    app = await buildApiApp({ pool, ledger, temporal: client, config, relay: requestRelay });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as { port: number };
    apiUrl = `http://127.0.0.1:${port}`;

    sandbox = await startSandbox({
      pool,
      port: 0,
      account: uniq('acct'),
      webhook: { url: `${apiUrl}/v1/webhooks/payments`, secret: WEBHOOK_SECRET },
    });
    const providerOptions = { baseUrl: sandbox.url, timeoutMs: 5_000 };
    workerConnection = await nativeConnection();
    worker = await createWorker({
      connection: workerConnection,
      namespace: 'default',
      taskQueue,
      deps: {
        pool,
        ledger,
        payments: createSandboxPaymentProvider(providerOptions),
        email: createSandboxEmailProvider(providerOptions),
      },
      workflowBundlePath: tracedWorkflowBundlePath(),
      tracing,
    });
    running = worker.run();
  });

  afterAll(async () => {
    if (worker?.getState() === 'RUNNING') worker.shutdown();
    await running;
    await workerConnection?.close();
    await sandbox?.close();
    await app?.close();
    await connection?.close();
    await pool?.end();
    await db?.drop();
    await tracing?.shutdown();
  });

  const spans = () => exporter.getFinishedSpans();
  const id = (s: ReadableSpan) => s.spanContext().spanId;
  const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

  /** The span's ancestors, nearest first, within the spans exported so far. */
  function ancestors(span: ReadableSpan, all: ReadableSpan[]): ReadableSpan[] {
    const byId = new Map(all.map((s) => [id(s), s]));
    const out: ReadableSpan[] = [];
    let parent = span.parentSpanId ? byId.get(span.parentSpanId) : undefined;
    while (parent) {
      out.push(parent);
      parent = parent.parentSpanId ? byId.get(parent.parentSpanId) : undefined;
    }
    return out;
  }

  it('joins the POST, the outbox start, the workflow, its activities, the provider calls and the webhook', async () => {
    const res = await fetch(`${apiUrl}/v1/orders`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${apiKey}`,
        'idempotency-key': uniq('idem'),
        'content-type': 'application/json',
      },
      body: JSON.stringify(validOrder()),
    });
    expect(res.status).toBe(202);
    const order = (await res.json()) as { id: string; workflowId: string };

    // The POST is over; a relay pass, outside any request's context, starts the workflow.
    expect(await laterRelay.relayDue()).toBe(1);
    const result = (await new Client({ connection }).workflow.getHandle(order.workflowId).result()) as {
      status: string;
    };
    expect(result.status).toBe('completed');

    // Workflow spans arrive through the worker's sink, the webhook span when the sandbox delivers.
    const post = () => spans().find((s) => s.name === 'POST /v1/orders' && s.kind === SpanKind.SERVER);
    await expect
      .poll(
        () => {
          const p = post();
          if (!p) return [];
          return spans()
            .filter((s) => traceOf(s) === traceOf(p))
            .map((s) => s.name);
        },
        { timeout: 60_000, interval: 200 },
      )
      .toEqual(
        expect.arrayContaining([
          'POST /v1/orders',
          'StartWorkflow:orderWorkflow',
          'RunWorkflow:orderWorkflow',
          'POST /v1/charges',
          'POST /v1/messages',
          'webhook charge.succeeded',
        ]),
      );

    const all = spans();
    const root = post()!;
    // The POST had no incoming traceparent: it is the root of the order's trace.
    expect(root.parentSpanId).toBeUndefined();
    const trace = all.filter((s) => traceOf(s) === traceOf(root));
    // Every span of the trace hangs off the POST through an unbroken parent chain.
    for (const s of trace) {
      if (s === root) continue;
      expect(ancestors(s, trace).at(-1), `${s.name} descends from the POST`).toBe(root);
    }
    // Every span that names this order's workflow is in this one trace.
    const aboutOrder = all.filter(
      (s) =>
        s.attributes.temporalWorkflowId === order.workflowId ||
        s.attributes['onceflow.workflow_id'] === order.workflowId,
    );
    expect(aboutOrder.length).toBeGreaterThan(0);
    expect(new Set(aboutOrder.map(traceOf))).toEqual(new Set([traceOf(root)]));

    const one = (name: string) => {
      const found = trace.filter((s) => s.name === name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    };
    const start = one('StartWorkflow:orderWorkflow');
    const run = one('RunWorkflow:orderWorkflow');
    expect(start.parentSpanId).toBe(id(root));
    expect(run.parentSpanId).toBe(id(start));

    // Each activity: StartActivity (in the workflow) -> RunActivity (in the worker), under the run.
    const runActivities = trace.filter((s) => s.name.startsWith('RunActivity:'));
    expect(runActivities.length).toBeGreaterThanOrEqual(2);
    for (const act of runActivities) {
      const chain = ancestors(act, trace);
      expect(chain[0]?.name).toBe(act.name.replace('RunActivity:', 'StartActivity:'));
      expect(chain).toContain(run);
    }

    // Each provider call: a client span inside an activity, and the sandbox's server span as its child.
    for (const path of ['/v1/charges', '/v1/messages']) {
      const calls = trace.filter((s) => s.name === `POST ${path}` && s.kind === SpanKind.CLIENT);
      expect(calls.length, path).toBeGreaterThanOrEqual(1);
      for (const call of calls) {
        expect(ancestors(call, trace)[0]?.name).toMatch(/^RunActivity:/);
        const served = trace.filter((s) => s.kind === SpanKind.SERVER && s.parentSpanId === id(call));
        expect(served.map((s) => s.name)).toEqual([`POST ${path}`]);
      }
    }

    // Logs join the trace: the POST's request line names the POST's span, and each line a
    // provider-calling activity writes names that activity's RunActivity span.
    const lines = logs.lines();
    const postLine = lines.find(
      (l) => l.msg === 'request' && l.method === 'POST' && l.route === '/v1/orders',
    );
    expect(postLine, 'the POST request line').toBeDefined();
    expect([postLine!.trace_id, postLine!.span_id]).toEqual([traceOf(root), id(root)]);
    const stepLines = lines.filter(
      (l) =>
        l.msg === 'step finished' &&
        l.workflowId === order.workflowId &&
        runActivities.some((a) => a.name === `RunActivity:${String(l.activityType)}`),
    );
    expect(stepLines.length).toBeGreaterThanOrEqual(2);
    for (const l of stepLines) {
      const span = runActivities.find((a) => id(a) === l.span_id);
      expect(span?.name, `${String(l.activityType)} line's span`).toBe(
        `RunActivity:${String(l.activityType)}`,
      );
      expect(l.trace_id).toBe(traceOf(root));
    }
    // Outside any span (this test's own code), a line carries neither.
    configureLogging({ destination: logs.stream, level: 'info', service: 'api' }).info('outside');
    const outside = logs.lines().find((l) => l.msg === 'outside')!;
    expect([outside.trace_id, outside.span_id]).toEqual([undefined, undefined]);

    // The webhook joins through the context stored with the order, and links the delivery's own request span.
    const webhook = one('webhook charge.succeeded');
    expect(webhook.parentSpanId).toBe(id(root));
    const delivery = all.find((s) => s.name === 'POST /v1/webhooks/payments' && s.kind === SpanKind.SERVER);
    expect(delivery).toBeDefined();
    expect(webhook.links.map((l) => l.context.spanId)).toContain(id(delivery!));
  });

  it('continues an incoming traceparent', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parentId = '00f067aa0ba902b7';
    const res = await fetch(`${apiUrl}/healthz`, {
      headers: { traceparent: `00-${traceId}-${parentId}-01` },
    });
    expect(res.status).toBeLessThan(500);
    await expect
      .poll(() => spans().find((s) => traceOf(s) === traceId && s.kind === SpanKind.SERVER)?.parentSpanId)
      .toBe(parentId);
  });
});
