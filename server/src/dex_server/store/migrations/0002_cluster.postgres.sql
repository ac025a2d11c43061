-- Several servers on one database: who dispatches which execution, which servers live,
-- RPCs routed to another server's Workers, and Streams kept in the store.
CREATE TABLE servers (
    server_id TEXT COLLATE "C" PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    backend_pid INTEGER NOT NULL DEFAULT 0
);

-- ready_at: when the execution may be dispatched (NULL while it waits on its Wait);
-- claimed_by: the server dispatching it (NULL: in the pool, any server may claim it).
ALTER TABLE executions ADD COLUMN ready_at DOUBLE PRECISION;
ALTER TABLE executions ADD COLUMN claimed_by TEXT COLLATE "C";
ALTER TABLE executions ADD COLUMN released_at DOUBLE PRECISION;
UPDATE executions SET ready_at = 0 WHERE phase <> 'waiting';
CREATE INDEX executions_pool ON executions (ready_at)
    WHERE claimed_by IS NULL AND ready_at IS NOT NULL;
CREATE INDEX executions_by_owner ON executions (claimed_by) WHERE claimed_by IS NOT NULL;

CREATE TABLE rpc_calls (
    call_id TEXT COLLATE "C" PRIMARY KEY,
    flow_type TEXT COLLATE "C" NOT NULL,
    caller TEXT COLLATE "C" NOT NULL,
    claimed_by TEXT COLLATE "C",
    created_at DOUBLE PRECISION NOT NULL,
    timeout_s DOUBLE PRECISION NOT NULL,
    request BYTEA NOT NULL,
    result BYTEA
);
CREATE INDEX rpc_calls_pool ON rpc_calls (flow_type, created_at) WHERE claimed_by IS NULL;

CREATE TABLE stream_messages (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    flow_type TEXT COLLATE "C" NOT NULL,
    stream TEXT COLLATE "C" NOT NULL,
    flow_id TEXT COLLATE "C" NOT NULL,
    source TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    value BYTEA NOT NULL
);
CREATE INDEX stream_messages_by_stream ON stream_messages (flow_type, stream, flow_id, seq);
