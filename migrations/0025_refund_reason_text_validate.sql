-- Why: validates the CHECK that 0024 added NOT VALID, in its own file so the
-- scan holds only SHARE UPDATE EXCLUSIVE (migrations/README.md).
SET LOCAL lock_timeout = '5s';

ALTER TABLE refunds VALIDATE CONSTRAINT refunds_reason_check;
