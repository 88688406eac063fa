-- Why: every status change notified `order_status` with the order's id, and
-- every waiting long-poll then re-read the row, though it waits only for a
-- terminal status: two or three wasted reads per order (issue #10, CPU per
-- order). The payload is now `<id> <status>` (ids never contain a space), so
-- a waiter stays asleep on a status that is not terminal. A notification is
-- still only a hint: the row stays the truth, and the waiter re-reads it when
-- woken. An API of the previous release, which expects the bare id, simply
-- finds no waiter for the longer payload and falls back to its periodic
-- re-read (src/api/order-waits.ts); this release also accepts a bare id.
CREATE OR REPLACE FUNCTION notify_order_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('order_status', NEW.id || ' ' || NEW.status);
  RETURN NULL;
END
$$;
