-- Initial schema (PostgreSQL). Same tables as 0001_init.sqlite.sql. Values are raw JSON;
-- records are JSON documents in `data`. Text keys use the "C" collation so that range
-- reads and ordering compare bytes, as SQLite does.
CREATE TABLE specs (
    flow_type TEXT COLLATE "C" PRIMARY KEY,
    spec BYTEA NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE flows (
    run_id TEXT COLLATE "C" PRIMARY KEY,
    flow_id TEXT COLLATE "C" NOT NULL,
    flow_type TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL,
    request_id TEXT NOT NULL DEFAULT '',
    retain_until DOUBLE PRECISION,
    data BYTEA NOT NULL
);
CREATE INDEX flows_by_flow_id ON flows (flow_id, run_id);
CREATE INDEX flows_by_type ON flows (flow_type, run_id);
CREATE INDEX flows_by_retention ON flows (retain_until) WHERE retain_until IS NOT NULL;
CREATE INDEX flows_running ON flows (run_id) WHERE status = 'running';

CREATE TABLE executions (
    run_id TEXT COLLATE "C" NOT NULL,
    execution_id TEXT COLLATE "C" NOT NULL,
    phase TEXT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (run_id, execution_id)
);

CREATE TABLE attributes (
    run_id TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    map_name TEXT COLLATE "C",
    value BYTEA,
    blob_hash TEXT,
    size BIGINT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX attributes_by_map ON attributes (run_id, map_name) WHERE map_name IS NOT NULL;
-- every Step task loads the singletons: do not walk a map's instances to find them
CREATE INDEX attributes_singletons ON attributes (run_id, name) WHERE map_name IS NULL;

CREATE TABLE channel_messages (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT COLLATE "C" NOT NULL,
    channel TEXT COLLATE "C" NOT NULL,
    map_name TEXT COLLATE "C",
    message_id TEXT COLLATE "C" NOT NULL,
    value BYTEA NOT NULL
);
CREATE INDEX channel_messages_by_channel ON channel_messages (run_id, channel, seq);

CREATE TABLE timers (
    run_id TEXT COLLATE "C" NOT NULL,
    execution_id TEXT COLLATE "C" NOT NULL,
    fire_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, execution_id, fire_at)
);
CREATE INDEX timers_by_time ON timers (fire_at);

CREATE TABLE history (
    run_id TEXT COLLATE "C" NOT NULL,
    event_id BIGINT NOT NULL,
    event_time DOUBLE PRECISION NOT NULL,
    type TEXT NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (run_id, event_id)
);

CREATE TABLE blobs (
    hash TEXT COLLATE "C" PRIMARY KEY,
    data BYTEA NOT NULL
);

CREATE TABLE blob_refs (
    run_id TEXT COLLATE "C" NOT NULL,
    hash TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, hash)
);
CREATE INDEX blob_refs_by_hash ON blob_refs (hash);
