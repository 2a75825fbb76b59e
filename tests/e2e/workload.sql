-- A SQLite workload for the e2e test: bulk insert, index, queries.
PRAGMA journal_mode = WAL;
CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, payload BLOB);
BEGIN;
WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq WHERE x < 200000)
INSERT INTO t (id, name, grp, payload) SELECT x, 'name-' || x, x % 97, zeroblob(x % 700) FROM seq;
COMMIT;
CREATE INDEX t_grp ON t (grp);
CREATE INDEX t_name ON t (name);
SELECT count(*), sum(id), sum(length(payload)) FROM t;
SELECT grp, count(*), min(id), max(id) FROM t WHERE grp IN (0, 1, 42, 96) GROUP BY grp ORDER BY grp;
SELECT name FROM t WHERE name LIKE 'name-1999%' ORDER BY name LIMIT 5;
CREATE TABLE u AS SELECT grp, group_concat(id, ',') AS ids FROM t WHERE id % 1000 = 0 GROUP BY grp;
SELECT count(*), sum(length(ids)) FROM u;
SELECT count(*) FROM t JOIN u ON t.grp = u.grp WHERE t.id < 5000;
DELETE FROM t WHERE id % 2 = 0;
VACUUM;
SELECT count(*), sum(id) FROM t;
PRAGMA integrity_check;
