-- The first outcome of each RPC invocation that carried a request_id, per run: a retry with
-- the same request_id gets this output back instead of running the RPC (and applying its
-- effects) again. Written in the transaction that commits the RPC's effects; deleted with
-- the run. output is the RPC's JSON output, NULL for none.
CREATE TABLE rpc_requests (
    run_id TEXT COLLATE "C" NOT NULL,
    request_id TEXT COLLATE "C" NOT NULL,
    output BYTEA,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, request_id)
);
