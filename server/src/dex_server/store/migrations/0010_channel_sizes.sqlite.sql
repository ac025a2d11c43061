-- The number of pending messages of each (run, Channel), so that a task snapshot reads its
-- Channel sizes at a cost of one row per non-empty Channel instead of counting the whole
-- backlog. Triggers keep it, on every path that inserts or deletes messages (and for a
-- server of before that still writes to the same database); a Channel's row goes when its
-- last message does. Messages are only ever inserted and deleted, never updated.
CREATE TABLE channel_sizes (
    run_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (run_id, channel)
) WITHOUT ROWID;

INSERT INTO channel_sizes (run_id, channel, size)
    SELECT run_id, channel, count(*) FROM channel_messages GROUP BY run_id, channel;

CREATE TRIGGER channel_sizes_add AFTER INSERT ON channel_messages
BEGIN
    INSERT INTO channel_sizes (run_id, channel, size) VALUES (new.run_id, new.channel, 1)
        ON CONFLICT (run_id, channel) DO UPDATE SET size = size + 1;
END;

CREATE TRIGGER channel_sizes_remove AFTER DELETE ON channel_messages
BEGIN
    UPDATE channel_sizes SET size = size - 1
        WHERE run_id = old.run_id AND channel = old.channel;
    DELETE FROM channel_sizes
        WHERE run_id = old.run_id AND channel = old.channel AND size = 0;
END;
