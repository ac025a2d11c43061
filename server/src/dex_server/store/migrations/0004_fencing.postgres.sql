-- Fencing: claim_epoch counts the changes of an execution's claim (takeover, pool, a job of
-- another server). A server writes on behalf of an attempt only while the row still names
-- it with the epoch it dispatched the attempt under.
ALTER TABLE executions ADD COLUMN claim_epoch BIGINT NOT NULL DEFAULT 0;
