-- Why: the outbox relay now starts the due rows of every task queue (each on
-- the queue recorded with it), not only the rows of its own queue, which
-- left rows of any other queue unstarted forever. Its poll and the backlog
-- gauges read "unstarted rows by next_attempt_at" with no queue in the
-- predicate, so the partial index leads with next_attempt_at instead of
-- task_queue. Partial, so started rows cost nothing.
CREATE INDEX workflow_outbox_due ON workflow_outbox (next_attempt_at) WHERE started_at IS NULL;
DROP INDEX workflow_outbox_pending;
