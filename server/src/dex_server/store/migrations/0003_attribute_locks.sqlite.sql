-- Attribute lock keys held across servers: one row per (run, key) while a Step method
-- attempt or an RPC holds it. holder names the attempt ("<execution>:<kind>#<attempt>") or
-- the RPC ("rpc:<id>"); server_id lets a live server free what a dead one held. The key
-- "#commit" is the transactional-RPC hold that keeps Step results of the run waiting.
-- One server per SQLite file keeps its locks in memory; the table keeps the schemas equal.
CREATE TABLE attribute_locks (
    run_id TEXT NOT NULL,
    lock_key TEXT NOT NULL,
    holder TEXT NOT NULL,
    server_id TEXT NOT NULL,
    PRIMARY KEY (run_id, lock_key)
);
CREATE INDEX attribute_locks_by_server ON attribute_locks (server_id);
