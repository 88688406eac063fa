-- Why: one order is one trace (issue #14 item 2). The outbox relay may start
-- an order's workflow long after the POST that accepted it, in a later pass
-- or in another API process, when that request's trace context is gone. The
-- POST's W3C trace context ({"traceparent": ..., "tracestate": ...}) is
-- stored with the start intent, so the workflow start (and through it the
-- workflow, its activities and provider calls) joins the POST's trace, and
-- the webhook handler finds the order's trace by workflow ID: providers
-- don't send our trace context back with their events. NULL when tracing is
-- off (nothing to carry) and for rows written before this file.
ALTER TABLE workflow_outbox
  ADD COLUMN trace_context jsonb
  CHECK (trace_context IS NULL OR jsonb_typeof(trace_context) = 'object');
