-- Every version of a Flow type's spec, keyed by its content hash: a run records the version
-- it started with (FlowRecord.spec_version) and is validated against it, so Workers and
-- clients of several code versions can share a Flow type. The latest version (updated_at)
-- serves starts that carry no spec. Specs stored before versions existed keep version ''
-- (what runs started before this migration record).
CREATE TABLE flow_specs (
    flow_type TEXT COLLATE "C" NOT NULL,
    version TEXT COLLATE "C" NOT NULL,
    spec BYTEA NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (flow_type, version)
);
CREATE INDEX flow_specs_by_time ON flow_specs (flow_type, updated_at);
INSERT INTO flow_specs (flow_type, version, spec, updated_at)
    SELECT flow_type, '', spec, updated_at FROM specs;
DROP TABLE specs;

-- One running run per Flow ID, enforced by the database. Older servers could start a second
-- run of an ID concurrently: keep the newest running run of each ID, terminate the others
-- (status, close time and a reason in the record; kept one day) and drop their executions.
-- A running record carries no status (it is the default): the fields go in front of the
-- others, leaving the user's JSON values untouched.
UPDATE flows SET
    status = 'terminated',
    retain_until = extract(epoch FROM now())::float8 + 86400.0,
    data = convert_to(
        '{"status":"terminated","closed_at":' || (extract(epoch FROM now())::float8)::text
        || ',"retain_until":' || (extract(epoch FROM now())::float8 + 86400.0)::text
        || ',"error_type":"DUPLICATE_RUN","error_message":"terminated by the schema upgrade:'
        || ' a newer run of its Flow ID was running",' || substr(convert_from(data, 'UTF8'), 2),
        'UTF8')
WHERE status = 'running'
    AND run_id NOT IN (SELECT max(run_id) FROM flows WHERE status = 'running' GROUP BY flow_id);
DELETE FROM executions e USING flows f WHERE f.run_id = e.run_id AND f.status <> 'running';
DELETE FROM timers t USING flows f WHERE f.run_id = t.run_id AND f.status <> 'running';
CREATE UNIQUE INDEX flows_one_running ON flows (flow_id) WHERE status = 'running';
