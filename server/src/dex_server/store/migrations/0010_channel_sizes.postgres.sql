-- The number of pending messages of each (run, Channel), so that a task snapshot reads its
-- Channel sizes at a cost of one row per non-empty Channel instead of counting the whole
-- backlog. A trigger keeps it, on every path that inserts or deletes messages (and for a
-- server of before that still writes to the same database); a Channel's row goes when its
-- last message does. Messages are only ever inserted and deleted, never updated.

-- no message written between the count below and the trigger's creation goes uncounted
LOCK TABLE channel_messages IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE channel_sizes (
    run_id TEXT COLLATE "C" NOT NULL,
    channel TEXT COLLATE "C" NOT NULL,
    size BIGINT NOT NULL,
    PRIMARY KEY (run_id, channel)
);

INSERT INTO channel_sizes (run_id, channel, size)
    SELECT run_id, channel, count(*) FROM channel_messages GROUP BY run_id, channel;

-- Decrement, then delete at zero, each re-reading the row: right even if two transactions
-- of one run ever changed its sizes at once (the run's row lock serialises them anyway).
CREATE FUNCTION channel_sizes_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    remaining BIGINT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO channel_sizes (run_id, channel, size) VALUES (NEW.run_id, NEW.channel, 1)
            ON CONFLICT (run_id, channel) DO UPDATE SET size = channel_sizes.size + 1;
    ELSE
        UPDATE channel_sizes SET size = size - 1
            WHERE run_id = OLD.run_id AND channel = OLD.channel
            RETURNING size INTO remaining;
        IF remaining = 0 THEN
            DELETE FROM channel_sizes
                WHERE run_id = OLD.run_id AND channel = OLD.channel AND size = 0;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER channel_sizes_count AFTER INSERT OR DELETE ON channel_messages
    FOR EACH ROW EXECUTE FUNCTION channel_sizes_count();
