-- Taking or deleting a pending message finds it by id; without this index each lookup
-- walked every pending message of the run, which made draining a long backlog quadratic.
CREATE INDEX channel_messages_by_id ON channel_messages (run_id, message_id);
