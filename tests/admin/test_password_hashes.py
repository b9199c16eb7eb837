"""admin_create_user sends passwords as the servers store them (no plain text in any statement,
log or process list): the hashes must be exactly the servers' own."""

from __future__ import annotations

import base64
import uuid

import psycopg
import pymysql
from conftest import MARIADB, POSTGRES

from backends.engines.mysql import mysql_native_hash
from backends.engines.postgresql import scram_sha_256


def test_scram_verifier_matches_postgresql() -> None:
    role, password = f"chk_{uuid.uuid4().hex[:8]}", "Some-pass-1234 ünïcode"
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as conn:  # a role is cluster-wide
        conn.execute(f"CREATE ROLE {role} PASSWORD 'Some-pass-1234'")
        try:
            stored = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()[0]
        finally:
            conn.execute(f"DROP ROLE {role}")
    iterations, salt = stored.split("$")[1].split(":")
    assert stored == scram_sha_256("Some-pass-1234", iterations=int(iterations), salt=base64.b64decode(salt))
    assert scram_sha_256(password) != scram_sha_256(password)  # a fresh salt each time


def test_native_hash_matches_mariadb() -> None:
    with pymysql.connect(**MARIADB) as conn, conn.cursor() as cur:
        cur.execute("SELECT PASSWORD(%s)", ("Some-pass-1234",))
        assert cur.fetchone()[0] == mysql_native_hash("Some-pass-1234")
