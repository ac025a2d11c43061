-- Initial schema. Values are raw JSON; records are JSON documents in `data`.
CREATE TABLE specs (
    flow_type TEXT PRIMARY KEY,
    spec BLOB NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE flows (
    run_id TEXT PRIMARY KEY,
    flow_id TEXT NOT NULL,
    flow_type TEXT NOT NULL,
    status TEXT NOT NULL,
    request_id TEXT NOT NULL DEFAULT '',
    retain_until REAL,
    data BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX flows_by_flow_id ON flows (flow_id, run_id);
CREATE INDEX flows_by_type ON flows (flow_type, run_id);
CREATE INDEX flows_by_retention ON flows (retain_until) WHERE retain_until IS NOT NULL;

CREATE TABLE executions (
    run_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_id, execution_id)
) WITHOUT ROWID;

CREATE TABLE attributes (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    map_name TEXT,
    value BLOB,
    blob_hash TEXT,
    size INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE INDEX attributes_by_map ON attributes (run_id, map_name) WHERE map_name IS NOT NULL;

CREATE TABLE channel_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    map_name TEXT,
    message_id TEXT NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX channel_messages_by_channel ON channel_messages (run_id, channel, seq);

CREATE TABLE timers (
    run_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    fire_at REAL NOT NULL,
    PRIMARY KEY (run_id, execution_id, fire_at)
) WITHOUT ROWID;
CREATE INDEX timers_by_time ON timers (fire_at);

CREATE TABLE history (
    run_id TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    event_time REAL NOT NULL,
    type TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (run_id, event_id)
) WITHOUT ROWID;

CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE blob_refs (
    run_id TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (run_id, hash)
) WITHOUT ROWID;
CREATE INDEX blob_refs_by_hash ON blob_refs (hash);
