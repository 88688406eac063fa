-- Why: every status change notified `order_status`, though the only
-- listeners (the API's long-polls, src/api/order-waits.ts) wait for a
-- terminal status and ignore the rest since 0013. Each notification still
-- cost a write to the notification queue, a wake-up of every listening
-- backend and a message to every API process: two of the three per
-- completed order were for nothing (issue #10, CPU per order). Now only a
-- change to a terminal status (TERMINAL_STATUSES in src/orders/model.ts:
-- completed, rejected, needs_attention) notifies. An API of an older
-- release waits on the same notifications and re-reads the row at its poll
-- interval as before; nothing else listens.
DROP TRIGGER orders_status_notify ON orders;

CREATE TRIGGER orders_status_notify
  AFTER UPDATE OF status ON orders
  FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND NEW.status IN ('completed', 'rejected', 'needs_attention'))
  EXECUTE FUNCTION notify_order_status();
