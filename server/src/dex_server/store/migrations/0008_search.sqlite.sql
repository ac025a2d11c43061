-- Flow search: the start and close times as columns (so a search can filter and order by
-- them), and one row per indexed Attribute value. A KEYWORD_ARRAY value has one row per
-- element (ord 0, 1, ...); every other value has one row with ord 0. Exactly one typed
-- column holds the value: kw (KEYWORD, KEYWORD_ARRAY), txt (TEXT), i (INT, BOOL as 0/1)
-- or num (DOUBLE, DATETIME as epoch seconds). Rows are written in the transaction that
-- writes the Attribute and deleted with the run.
ALTER TABLE flows ADD COLUMN started_at REAL;
ALTER TABLE flows ADD COLUMN closed_at REAL;
UPDATE flows SET
    started_at = json_extract(CAST(data AS TEXT), '$.started_at'),
    closed_at = json_extract(CAST(data AS TEXT), '$.closed_at');
CREATE INDEX flows_by_start ON flows (started_at, run_id);
CREATE INDEX flows_by_close ON flows (closed_at, run_id);

CREATE TABLE search_values (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    ord INTEGER NOT NULL,
    type TEXT NOT NULL,
    kw TEXT,
    txt TEXT,
    i INTEGER,
    num REAL,
    PRIMARY KEY (run_id, key, ord)
) WITHOUT ROWID;
CREATE INDEX search_by_kw ON search_values (key, kw, run_id);
CREATE INDEX search_by_i ON search_values (key, i, run_id);
CREATE INDEX search_by_num ON search_values (key, num, run_id);
