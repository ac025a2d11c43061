-- Flow search: the start and close times as columns (so a search can filter and order by
-- them), and one row per indexed Attribute value. A KEYWORD_ARRAY value has one row per
-- element (ord 0, 1, ...); every other value has one row with ord 0. Exactly one typed
-- column holds the value: kw (KEYWORD, KEYWORD_ARRAY), txt (TEXT), i (INT, BOOL as 0/1)
-- or num (DOUBLE, DATETIME as epoch seconds). Rows are written in the transaction that
-- writes the Attribute and deleted with the run. The (key, value, run_id) indexes serve
-- an equality or a range on one key, and an ORDER BY that key, without a sort.
ALTER TABLE flows ADD COLUMN started_at DOUBLE PRECISION;
ALTER TABLE flows ADD COLUMN closed_at DOUBLE PRECISION;
UPDATE flows SET
    started_at = (convert_from(data, 'UTF8')::jsonb ->> 'started_at')::double precision,
    closed_at = (convert_from(data, 'UTF8')::jsonb ->> 'closed_at')::double precision;
CREATE INDEX flows_by_start ON flows (started_at, run_id);
CREATE INDEX flows_by_close ON flows (closed_at, run_id);

CREATE TABLE search_values (
    run_id TEXT COLLATE "C" NOT NULL,
    key TEXT COLLATE "C" NOT NULL,
    ord INTEGER NOT NULL,
    type TEXT NOT NULL,
    kw TEXT COLLATE "C",
    txt TEXT,
    i BIGINT,
    num DOUBLE PRECISION,
    PRIMARY KEY (run_id, key, ord)
);
CREATE INDEX search_by_kw ON search_values (key, kw, run_id);
CREATE INDEX search_by_i ON search_values (key, i, run_id);
CREATE INDEX search_by_num ON search_values (key, num, run_id);
