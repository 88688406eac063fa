// Workflow interceptors, built into the workflow bundle (src/worker/bundle.ts passes this file as
// an interceptor module; it is not a workflow and not exported from index.ts). They trace each
// workflow run and each activity it schedules as children of the span that started the workflow
// (RunWorkflow, StartActivity); spans leave the sandbox through the `exporter` sink, which the
// worker always injects (src/tracing), dropping them when tracing is off.
import type { WorkflowInterceptorsFactory } from '@temporalio/workflow';
import {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow/index.js';

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [new OpenTelemetryInboundInterceptor()],
  outbound: [new OpenTelemetryOutboundInterceptor()],
  internals: [new OpenTelemetryInternalsInterceptor()],
});
