-- Why: the webhook route no longer holds a transaction (and the event row's
-- lock) across its signal to Temporal (issue #24, item 6). It records the
-- event first as `signal_pending`, signals with a deadline, then records the
-- result. A redelivery that finds the row still `signal_pending` signals
-- again, so a failed signal is never lost; `signal_lease_until` keeps an
-- overlapping redelivery from signalling while the first attempt is still in
-- its deadline (it waits for that attempt's result instead). A process that
-- dies mid-signal leaves a lease that simply runs out.
--
-- Online-safe (migrations/README.md): a nullable column without a default
-- is a catalog-only change; its brief ACCESS EXCLUSIVE lock is bounded by
-- lock_timeout, so it never queues the webhook route behind a long reader.
SET LOCAL lock_timeout = '5s';

ALTER TABLE webhook_events ADD COLUMN signal_lease_until timestamptz;
