-- Why: `GET /v1/orders/{id}?wait=N` long-polls until the order is terminal.
-- It used to re-read the row every 250 ms, which added up to 250 ms to every
-- order a client waited for (issue #10: p50 and p99). Now every change of an
-- order's status, by any writer (the worker's status steps, the operator,
-- the API), notifies channel `order_status` with the order's id as payload,
-- at commit (NOTIFY is transactional: a rolled-back write notifies nobody).
-- Each API process listens on one dedicated connection and wakes the
-- waiters of that order at once; it falls back to polling while that
-- connection is down (src/api/order-waits.ts). A notification is only a
-- hint to re-read: the row stays the truth.
CREATE FUNCTION notify_order_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('order_status', NEW.id);
  RETURN NULL;
END
$$;

CREATE TRIGGER orders_status_notify
  AFTER UPDATE OF status ON orders
  FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION notify_order_status();
