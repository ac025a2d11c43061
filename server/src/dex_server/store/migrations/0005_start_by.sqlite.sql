-- start_by: when a pooled execution (claimed_by NULL) fails unless a server's Worker took
-- it, from its schedule-to-start timeout; NULL: it waits in the pool as long as it takes.
ALTER TABLE executions ADD COLUMN start_by REAL;
CREATE INDEX executions_start_by ON executions (start_by)
    WHERE claimed_by IS NULL AND start_by IS NOT NULL;
