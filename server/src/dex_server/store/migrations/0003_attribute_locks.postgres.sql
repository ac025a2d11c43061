-- Attribute lock keys held across servers: one row per (run, key) while a Step method
-- attempt or an RPC holds it. holder names the attempt ("<execution>:<kind>#<attempt>") or
-- the RPC ("rpc:<id>"); server_id lets a live server free what a dead one held. The key
-- "#commit" is the transactional-RPC hold that keeps Step results of the run waiting.
CREATE TABLE attribute_locks (
    run_id TEXT COLLATE "C" NOT NULL,
    lock_key TEXT COLLATE "C" NOT NULL,
    holder TEXT COLLATE "C" NOT NULL,
    server_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, lock_key)
);
CREATE INDEX attribute_locks_by_server ON attribute_locks (server_id);
