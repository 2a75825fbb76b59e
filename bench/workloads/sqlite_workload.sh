#!/bin/sh
# sqlite_workload.sh ROWS: sqlite3 (Debian's CLI) bulk-inserts ROWS rows with
# text payloads into an in-memory database, indexes them and runs grouping
# and join queries - the page cache, the parser and the sorter all allocate.
rows=${1:-200000}
exec sqlite3 :memory: <<SQL
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, body TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $rows)
INSERT INTO t(k, name, body) SELECT x % 1000, 'name' || (x * 7919 % 100000), hex(randomblob(16 + x % 200)) FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(length(body)) FROM t;
SELECT k, count(*), max(length(name)) FROM t GROUP BY k ORDER BY 2 DESC, 1 LIMIT 3;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k AND b.id = a.id + 1000;
UPDATE t SET body = body || 'x' WHERE k < 100;
DELETE FROM t WHERE k % 3 = 0;
VACUUM;
SELECT count(*) FROM t;
SQL
