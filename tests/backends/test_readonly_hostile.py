"""All read-only layers together against real MariaDB and PostgreSQL: every hostile statement of
the corpus (the public escapes of peer servers plus variants) is refused through
run_sql_readonly, and afterwards the databases' checksums are unchanged and no file exists
where OUTFILE/DUMPFILE/COPY TO/lo_export/COPY TO PROGRAM would have written one.

Control tests prove the detectors can fail: a row changed by an admin connection changes the
checksum, and a file the server writes itself is found.
"""

from __future__ import annotations

import glob
import os
import uuid
from collections.abc import Iterator

import psycopg
import pymysql
import pytest

from tests.query import error, ok
from tests.query.test_sql_tools import sql_env  # noqa: F401 - the shared module fixture

MARK = f"/tmp/mcpgw_hostile_{uuid.uuid4().hex[:12]}"

MYSQL_HOSTILE = [
    "SELECT 1; DROP TABLE items",
    "SELECT 1; COMMIT; DROP TABLE items",
    "SeLeCt 1; dRoP tAbLe items",
    "DROP TABLE items",
    "DELETE FROM items",
    "UPDATE items SET name = 'pwned'",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "REPLACE INTO items (id, name) VALUES (1, 'pwned')",
    "TRUNCATE items",
    "CREATE TABLE pwned (a int)",
    "CREATE TABLE pwned AS SELECT * FROM items",
    "ALTER TABLE items ADD COLUMN pwned int",
    "RENAME TABLE items TO pwned",
    "/* comment */ DELETE FROM items",
    "-- comment\nDELETE FROM items",
    "# comment\nDELETE FROM items",
    "/*! DELETE FROM items */",
    "SELECT 1 /*!, (SELECT SLEEP(5)) */",
    "SELECT /*M! SLEEP(5), */ 1",
    "SELECT /*!50000 SLEEP(5) */ 1",
    f"SELECT * FROM items INTO OUTFILE '{MARK}_out.txt'",
    f"SELECT * FROM items INTO DUMPFILE '{MARK}_dump.bin'",
    f"SELECT name FROM items LIMIT 1 INTO OUTFILE '{MARK}_out2.txt'",
    f"SELECT * FROM (SELECT 1) t INTO OUTFILE '{MARK}_out3.txt' /* trailing */",
    "SELECT id INTO @x FROM items LIMIT 1",
    "SELECT @x := 1",
    "SELECT * FROM items FOR UPDATE",
    "SELECT * FROM items FOR UPDATE NOWAIT",
    "SELECT * FROM items LOCK IN SHARE MODE",
    "SELECT * FROM items WHERE id IN (SELECT id FROM items FOR UPDATE)",
    "CALL mysql.pwn()",
    "DO SLEEP(5)",
    "SET @a = 1",
    "SET GLOBAL max_connections = 1",
    "SET SESSION tx_read_only = 0",
    "SET STATEMENT tx_read_only = 0 FOR DELETE FROM items",
    "PREPARE s FROM 'DELETE FROM items'",
    "EXECUTE s",
    "HANDLER items OPEN",
    "LOCK TABLES items WRITE",
    "UNLOCK TABLES",
    "SELECT LOAD_FILE('/etc/passwd')",
    "SELECT load_file(0x2f6574632f706173737764)",
    "SELECT 1 UNION SELECT LOAD_FILE('/etc/passwd')",
    "SELECT SLEEP(5)",
    "SELECT 1 FROM items WHERE SLEEP(5)",
    "SELECT * FROM (SELECT SLEEP(5)) AS t",
    "WITH d AS (SELECT SLEEP(5)) SELECT * FROM d",
    "SELECT BENCHMARK(100000000, MD5('a'))",
    "SELECT GET_LOCK('mcpgw', 0)",
    "SELECT RELEASE_LOCK('mcpgw')",
    "SELECT IS_FREE_LOCK('mcpgw')",
    "SELECT MASTER_POS_WAIT('x', 1)",
    "SELECT sys_exec('touch /tmp/pwned')",
    "SELECT * FROM mysql.user",
    "SELECT authentication_string FROM mysql.global_priv",
    "LOAD DATA INFILE '/etc/passwd' INTO TABLE items",
    "GRANT ALL ON *.* TO 'pwned'@'%'",
    "CREATE USER 'pwned'@'%'",
    "KILL 1",
    "FLUSH PRIVILEGES",
    "SHUTDOWN",
    "INSTALL PLUGIN pwned SONAME 'pwned.so'",
    "BEGIN",
    "START TRANSACTION",
    "COMMIT",
    "XA START 'x'",
    "EXPLAIN ANALYZE SELECT SLEEP(5)",
    "ANALYZE SELECT SLEEP(5)",
    "EXPLAIN DELETE FROM items",
    "EXPLAIN FORMAT=JSON DELETE FROM items",
    "ANALYZE TABLE items",
    "OPTIMIZE TABLE items",
    "REPAIR TABLE items",
    "USE mysql",
    "SELECT 1\x00; DROP TABLE items",
    "VALUES (1); DROP TABLE items",
    "SELECT 1 -- x\n; DROP TABLE items",
    "SELECT 1 #\n; DROP TABLE items",
    "SELECT '\\''; DROP TABLE items; -- '",
    "SELECT * FROM items PROCEDURE ANALYSE()",
    f"SELECT * FROM items UNION ALL SELECT * FROM items INTO OUTFILE '{MARK}_union.txt'",
    "SELECT id, name INTO @a, @b FROM items LIMIT 1",
    "SELECT * FROM items WHERE id = (SELECT id FROM items LIMIT 1 FOR UPDATE)",
    "SELECT * FROM items LIMIT (SELECT 100000000)",
]
PG_HOSTILE = [
    "SELECT 1; COMMIT; DROP TABLE items",
    "COMMIT; DROP TABLE items",
    "ROLLBACK; DELETE FROM items",
    "END; DELETE FROM items",
    "SELECT 1; SET TRANSACTION READ WRITE; DELETE FROM items",
    "DELETE FROM items",
    "UPDATE items SET name = 'pwned'",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "MERGE INTO items USING items s ON true WHEN MATCHED THEN DELETE",
    "TRUNCATE items",
    "DROP TABLE items",
    "/* x */ DELETE FROM items",
    "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d",
    "WITH u AS (UPDATE items SET name = 'x' RETURNING id) SELECT count(*) FROM u",
    "WITH i AS (INSERT INTO items (id, name) VALUES (999, 'x') RETURNING id) SELECT * FROM i",
    "WITH a AS (SELECT 1), d AS (DELETE FROM items RETURNING 1) SELECT * FROM a",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT * FROM pg_read_file('/etc/passwd')",
    "SELECT * FROM pg_catalog.pg_read_file('/etc/passwd')",
    "SELECT * FROM \"pg_read_file\"('/etc/passwd')",
    "SELECT PG_READ_FILE('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/passwd')",
    "SELECT * FROM pg_ls_dir('/')",
    "SELECT pg_stat_file('/etc/passwd')",
    "SELECT x FROM items, LATERAL pg_ls_dir('/') AS x",
    "SELECT (SELECT pg_read_file('/etc/passwd'))",
    "SELECT lo_import('/etc/passwd')",
    f"SELECT lo_export(lo_from_bytea(0, 'x'), '{MARK}_lo.txt')",
    f"COPY items TO '{MARK}_copy.txt'",
    f"COPY (SELECT 1) TO PROGRAM 'touch {MARK}_prog'",
    "COPY items FROM '/etc/passwd'",
    "SELECT dblink_exec('dbname=postgres', 'DROP TABLE items')",
    "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(a int)",
    "SELECT pg_sleep(5)",
    "SELECT pg_sleep_for('5 seconds')",
    "SELECT pg_sleep_until(now() + interval '5 seconds')",
    "SELECT 1 FROM pg_sleep(5)",
    "SELECT * FROM items WHERE id = 1 OR pg_sleep(5) IS NULL",
    "SELECT pg_terminate_backend(pg_backend_pid())",
    "SELECT pg_cancel_backend(1)",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT pg_reload_conf()",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_xact_lock(1)",
    "SELECT query_to_xml('DELETE FROM items RETURNING 1', true, true, '')",
    "SELECT nextval('items_seq')",
    "SELECT txid_current()",
    "SELECT pg_notify('x', 'y')",
    "SELECT * FROM items FOR UPDATE",
    "SELECT * FROM items FOR SHARE",
    "SELECT * FROM items FOR NO KEY UPDATE",
    "SELECT * FROM items FOR KEY SHARE SKIP LOCKED",
    "SELECT * INTO pwned FROM items",
    "CREATE TABLE pwned AS SELECT * FROM items",
    "CREATE TEMP TABLE pwned (a int)",
    "SET statement_timeout = 0",
    "SET ROLE postgres",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
    "RESET ALL",
    "BEGIN READ WRITE",
    "DO $$ BEGIN DELETE FROM items; END $$",
    "CALL pwn()",
    "PREPARE s AS DELETE FROM items",
    "EXECUTE s",
    "DEALLOCATE ALL",
    "LISTEN x",
    "NOTIFY x",
    "VACUUM items",
    "ANALYZE items",
    "CLUSTER items",
    "REINDEX TABLE items",
    "LOCK TABLE items",
    "DISCARD ALL",
    "CHECKPOINT",
    "LOAD 'pwned'",
    "CREATE EXTENSION dblink",
    "CREATE FUNCTION pwned() RETURNS int AS 'select 1' LANGUAGE sql",
    "ALTER SYSTEM SET work_mem = '1GB'",
    "GRANT ALL ON items TO PUBLIC",
    "EXPLAIN ANALYZE DELETE FROM items",
    "EXPLAIN (ANALYZE) SELECT pg_sleep(5)",
    "EXPLAIN (ANALYZE true) SELECT 1",
    "EXPLAIN DELETE FROM items",
    "SHOW search_path; DROP TABLE items",
    "TABLE items; DROP TABLE items",
    "SELECT $$ ; $$; DROP TABLE items",
    "SELECT * FROM pg_authid",
    "SELECT rolpassword FROM pg_catalog.pg_authid",
    "SELECT * FROM pg_shadow",
    "SELECT 1\x00; DROP TABLE items",
    "SELECT '\\', pg_sleep(5) --'",
    "SELECT * FROM items WHERE id = 1 FOR UPDATE OF items",
    "COPY (SELECT 1) TO STDOUT",
    "SELECT pg_catalog.set_config('default_transaction_read_only', 'off', false)",
    "SELECT (pg_read_file('/etc/passwd'))::text",
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION SELECT pg_sleep(1)::int FROM r) SELECT * FROM r",
    "SELECT lo_get(1)",
    "SELECT * FROM pg_ls_waldir()",
    "SELECT pg_ls_logdir()",
    "SELECT current_setting('data_directory'); SELECT 1",
    "SELECT dblink_connect('dbname=postgres')",
    "SELECT * FROM items FETCH FIRST 50 PERCENT ROWS ONLY",
]


def mariadb_checksum(settings: dict) -> dict:
    conn = pymysql.connect(**settings)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1")
            tables = [r[0] for r in cur.fetchall()]
            sums = {}
            for table in tables:
                cur.execute(f"CHECKSUM TABLE `{table.replace('`', '``')}` EXTENDED")
                sums[table] = cur.fetchone()[1]
            # Only the accounts a hostile statement here would create: other tests (and other
            # sessions on a shared server) create and drop their own users concurrently.
            cur.execute("SELECT COUNT(*) FROM mysql.user WHERE User LIKE 'pwned%'")
            users = cur.fetchone()[0]
            cur.execute("SELECT @@global.max_connections, @@global.read_only")
            globals_ = cur.fetchone()
        return {"tables": sums, "users": users, "globals": globals_}
    finally:
        conn.close()


def postgres_checksum(settings: dict) -> dict:
    with psycopg.connect(**settings) as conn:
        tables = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2"
        ).fetchall()
        sums = {}
        for schema, table in tables:
            qualified = psycopg.sql.Identifier(schema, table)
            query = psycopg.sql.SQL("SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {} t").format(
                qualified
            )
            sums[f"{schema}.{table}"] = conn.execute(query).fetchone()[0]
        return {
            "tables": sums,
            "large_objects": conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0],
            # Every attribute of the roles a hostile statement here could create or change (the
            # session's own, the built-in ones, any "pwned"): other tests (and other sessions on a
            # shared server) create and drop their own roles concurrently.
            "roles": conn.execute(
                "SELECT string_agg(r::text, ',' ORDER BY rolname) FROM pg_roles r "
                "WHERE rolname LIKE 'pwned%' OR rolname = current_user OR rolname LIKE 'pg\\_%'"
            ).fetchone()[0],
            "extensions": conn.execute("SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension").fetchone()[0],
            "functions": conn.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace").fetchone()[0],
            "auto_conf": conn.execute("SELECT count(*) FROM pg_file_settings WHERE sourcefile LIKE '%auto.conf'").fetchone()[0],
        }


def written_files() -> list[str]:
    return sorted(glob.glob(f"{MARK}*"))


@pytest.fixture(scope="module")
def baseline(sql_env: dict) -> Iterator[dict]:  # noqa: F811
    yield {"maria": mariadb_checksum(sql_env["maria"]), "pg": postgres_checksum(sql_env["pg"])}
    for path in written_files():  # only reached if a test failed: leave /tmp clean anyway
        os.remove(path)


@pytest.mark.parametrize("sql", MYSQL_HOSTILE)
def test_mariadb_hostile_statement_is_refused(sql_env: dict, baseline: dict, sql: str) -> None:  # noqa: F811
    err = error(sql_env["handler"], "run_sql_readonly", target_id="maria", sql=sql, timeout_sec=2)
    assert err["code"] == "INVALID_ARGUMENT", err


@pytest.mark.parametrize("sql", PG_HOSTILE)
def test_postgres_hostile_statement_is_refused(sql_env: dict, baseline: dict, sql: str) -> None:  # noqa: F811
    err = error(sql_env["handler"], "run_sql_readonly", target_id="pg", sql=sql, timeout_sec=2)
    assert err["code"] == "INVALID_ARGUMENT", err


@pytest.mark.parametrize("tool", ["explain_sql", "run_sql_readonly"])
@pytest.mark.parametrize("target", ["maria", "pg"])
def test_hostile_statements_through_every_sql_tool(sql_env: dict, baseline: dict, tool: str, target: str) -> None:  # noqa: F811
    corpus = MYSQL_HOSTILE if target == "maria" else PG_HOSTILE
    for sql in corpus[:20]:
        assert error(sql_env["handler"], tool, target_id=target, sql=sql)["code"] == "INVALID_ARGUMENT", sql


def test_databases_unchanged_and_no_file_written(sql_env: dict, baseline: dict) -> None:  # noqa: F811
    """Runs after the corpus (pytest keeps file order): same checksums, no files."""
    assert mariadb_checksum(sql_env["maria"]) == baseline["maria"]
    assert postgres_checksum(sql_env["pg"]) == baseline["pg"]
    assert written_files() == []
    with psycopg.connect(**sql_env["pg"]) as conn:  # as the server sees its own /tmp
        for suffix in ("_lo.txt", "_copy.txt", "_prog"):
            assert conn.execute("SELECT pg_stat_file(%s, true)", (MARK + suffix,)).fetchone()[0] is None
    # The session still works and answers normally.
    assert ok(sql_env["handler"], "run_sql_readonly", target_id="maria", sql="SELECT COUNT(*) FROM items")["rows"] == [[50]]


# -- controls: the detectors above can fail --------------------------------------------------


def test_control_checksums_see_a_change(sql_env: dict, baseline: dict) -> None:  # noqa: F811
    conn = pymysql.connect(**sql_env["maria"], autocommit=True)
    with psycopg.connect(**sql_env["pg"], autocommit=True) as pg:
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE items SET name = 'changed' WHERE id = 1")
            pg.execute("UPDATE items SET name = 'changed' WHERE id = 1")
            assert mariadb_checksum(sql_env["maria"]) != baseline["maria"]
            assert postgres_checksum(sql_env["pg"]) != baseline["pg"]
        finally:
            with conn.cursor() as cur:
                cur.execute("UPDATE items SET name = 'green' WHERE id = 1")
            pg.execute("UPDATE items SET name = 'green' WHERE id = 1")
            conn.close()
    assert mariadb_checksum(sql_env["maria"]) == baseline["maria"]
    assert postgres_checksum(sql_env["pg"]) == baseline["pg"]


def test_control_a_server_written_file_is_found(sql_env: dict) -> None:  # noqa: F811
    path = f"{MARK}_control.txt"
    conn = pymysql.connect(**sql_env["maria"], autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 INTO OUTFILE '{path}'")
        assert written_files() == [path]
    finally:
        conn.close()
        os.remove(path)
    assert written_files() == []


def test_string_escape_differential_runs_the_checked_reading(sql_env: dict) -> None:  # noqa: F811
    """`SELECT '\\', SLEEP(1) -- '` is one string to sqlglot (and to MariaDB by default) but a
    SLEEP call under sql_mode NO_BACKSLASH_ESCAPES. What runs is the regenerated text, which
    reads the same in both modes, so the checked reading is the one executed."""
    from backends.engines import engine_for
    from backends.readonly import check_readonly

    sql = "SELECT '\\', SLEEP(1) AS s -- '"
    checked = check_readonly(sql, engine_for("mysql"), row_cap=11)
    conn = pymysql.connect(**sql_env["maria"])
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
            cur.execute(sql)  # control: the raw text does call SLEEP in this mode
            assert [d[0] for d in cur.description] == ["\\", "s"]
        conn.rollback()
        limits = {"timeout_ms": 3000, "max_rows": 10, "max_bytes": 10_000}
        out = engine_for("mysql").execute(conn, checked.sql, **limits)
        assert out.rows == [["', SLEEP(1) AS s -- "]]
    finally:
        conn.close()
    through_tool = ok(sql_env["handler"], "run_sql_readonly", target_id="maria", sql=sql)
    assert through_tool["rows"] == [["', SLEEP(1) AS s -- "]]
