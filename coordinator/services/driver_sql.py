"""Prebuilt statements of the ingest path run on PostgreSQL's driver cursor, inside the session.

Profiling one contribution on PostgreSQL (``tests/benchmarks/profile_ingest.py --db postgres
--cprofile``) showed SQLAlchemy's per-execute work (execution context, result metadata,
row processing) at several times the CPU of psycopg's own execute for these small
statements. The hot statements are defined once in SQLAlchemy (Core or ``text``), compiled
once per dialect here, and run on the psycopg connection beneath the session's
:class:`~sqlalchemy.engine.Connection`, in the transaction SQLAlchemy began and will commit or
roll back. Driver errors are re-raised as SQLAlchemy's (``IntegrityError``,
``OperationalError`` ...) with the parameters hidden, so callers and the app's database error
handler see what they saw before. Other dialects (SQLite) run the statement through
SQLAlchemy as usual.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Executable
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement

_compiled: dict[tuple[int, str], str] = {}


def _sql(conn: Connection, statement: ClauseElement) -> str:
    key = (id(statement), conn.dialect.name)
    sql = _compiled.get(key)
    if sql is None:
        sql = _compiled[key] = str(statement.compile(dialect=conn.dialect))
    return sql


def fetch(conn: Connection, statement: Executable, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """All rows of ``statement`` (module-level, prebuilt) as tuples; [] when it returns none.

    Only for statements whose result columns need no SQLAlchemy type processing (integers,
    strings, booleans), and with every parameter given (no Python-side column defaults are
    applied): rows come back exactly as the driver returns them.
    """
    if conn.dialect.name != "postgresql":
        return [tuple(row) for row in conn.execute(statement, params)]
    assert isinstance(statement, ClauseElement)
    sql = _sql(conn, statement)
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        with driver.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []
    except conn.dialect.dbapi.Error as exc:  # type: ignore[union-attr]
        raise DBAPIError.instance(
            sql, params, exc, conn.dialect.dbapi.Error,  # type: ignore[union-attr]
            hide_parameters=True, dialect=conn.dialect,
        ) from exc


def pipeline(
    conn: Connection,
    first: list[tuple[Executable, dict[str, Any]]],
    statement: Executable,
    many: list[dict[str, Any]],
) -> list[list[tuple[Any, ...]]]:
    """Run each of ``first`` (results discarded), then ``statement`` once per ``many`` item,
    in one PostgreSQL pipeline (one network round trip); the rows of each ``statement`` run.
    """
    sql = [(_sql(conn, s), p) for s, p in first]  # type: ignore[arg-type]
    many_sql = _sql(conn, statement)  # type: ignore[arg-type]
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        with driver.cursor() as cursor, driver.cursor() as batch:
            with driver.pipeline():
                for text_, params in sql:
                    cursor.execute(text_, params)
                batch.executemany(many_sql, many, returning=True)
            results = [list(batch.fetchall())]
            while batch.nextset():
                results.append(list(batch.fetchall()))
            return results
    except conn.dialect.dbapi.Error as exc:  # type: ignore[union-attr]
        raise DBAPIError.instance(
            many_sql, {}, exc, conn.dialect.dbapi.Error,  # type: ignore[union-attr]
            hide_parameters=True, dialect=conn.dialect,
        ) from exc
