-- Every version of a Flow type's spec, keyed by its content hash: a run records the version
-- it started with (FlowRecord.spec_version) and is validated against it, so Workers and
-- clients of several code versions can share a Flow type. The latest version (updated_at)
-- serves starts that carry no spec. Specs stored before versions existed keep version ''
-- (what runs started before this migration record).
CREATE TABLE flow_specs (
    flow_type TEXT NOT NULL,
    version TEXT NOT NULL,
    spec BLOB NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (flow_type, version)
) WITHOUT ROWID;
CREATE INDEX flow_specs_by_time ON flow_specs (flow_type, updated_at);
INSERT INTO flow_specs (flow_type, version, spec, updated_at)
    SELECT flow_type, '', spec, updated_at FROM specs;
DROP TABLE specs;

-- One running run per Flow ID, enforced by the database. Older servers could start a second
-- run of an ID concurrently: keep the newest running run of each ID, terminate the others
-- (status, close time and a reason in the record; kept one day) and drop their executions.
UPDATE flows SET
    status = 'terminated',
    retain_until = (julianday('now') - 2440587.5) * 86400.0 + 86400.0,
    data = CAST(json_set(
        CAST(data AS TEXT),
        '$.status', 'terminated',
        '$.closed_at', (julianday('now') - 2440587.5) * 86400.0,
        '$.retain_until', (julianday('now') - 2440587.5) * 86400.0 + 86400.0,
        '$.error_type', 'DUPLICATE_RUN',
        '$.error_message', 'terminated by the schema upgrade: a newer run of its Flow ID was running'
    ) AS BLOB)
WHERE status = 'running'
    AND run_id NOT IN (SELECT max(run_id) FROM flows WHERE status = 'running' GROUP BY flow_id);
DELETE FROM executions WHERE EXISTS
    (SELECT 1 FROM flows f WHERE f.run_id = executions.run_id AND f.status <> 'running');
DELETE FROM timers WHERE EXISTS
    (SELECT 1 FROM flows f WHERE f.run_id = timers.run_id AND f.status <> 'running');
CREATE UNIQUE INDEX flows_one_running ON flows (flow_id) WHERE status = 'running';
