"""Prebuilt statements of the ingest path run on the driver's cursor, inside the session.

Profiling one contribution (``tests/benchmarks/profile_ingest.py --cprofile``) showed
SQLAlchemy's per-execute work (execution context, result metadata, row processing) at several
times the CPU of the driver's own execute for these small statements, on PostgreSQL and on
SQLite alike (where it was most of the time the writer held the database's one write lock).
The hot statements are defined once in SQLAlchemy (Core or ``text``), compiled once per
dialect (and, for an INSERT, per set of columns) here, and run on the psycopg or sqlite3
connection beneath the session's :class:`~sqlalchemy.engine.Connection`, in the transaction
SQLAlchemy began and will commit or roll back. Driver errors are re-raised as SQLAlchemy's
(``IntegrityError``, ``OperationalError`` ...) with the parameters hidden, so callers and the
app's database error handler see what they saw before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Executable, Insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

_compiled: dict[tuple[Any, ...], _Compiled] = {}


@dataclass(frozen=True)
class _Compiled:
    sql: str
    positions: tuple[str, ...] | None  # bind names in order, for a positional driver
    processors: dict[str, Callable[[Any], Any]]
    literals: dict[str, Any]  # the statement's own values (the 1 of ``version + 1``)

    def params(self, values: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        if self.literals:
            values = {**self.literals, **values}
        if self.processors:
            values = {k: self.processors[k](v) if k in self.processors else v
                      for k, v in values.items()}
        return values if self.positions is None else tuple(values[k] for k in self.positions)


def _compile(conn: Connection, statement: ClauseElement, keys: Iterable[str] = ()) -> _Compiled:
    key = (id(statement), conn.dialect.name, *sorted(keys))
    found = _compiled.get(key)
    if found is None:
        compiled = statement.compile(dialect=conn.dialect, column_keys=sorted(keys) or None)
        assert isinstance(compiled, SQLCompiler)
        positions = tuple(compiled.positiontup) if compiled.positiontup else None
        processors: dict[str, Callable[[Any], Any]] = {}
        for name, processor in compiled._bind_processors.items():
            assert callable(processor), "no tuple-valued binds in these statements"
            processors[name] = processor
        literals = {k: b.effective_value for k, b in compiled.binds.items() if not b.required}
        found = _compiled[key] = _Compiled(str(compiled), positions, processors, literals)
    return found


def _sql(conn: Connection, statement: ClauseElement) -> str:
    return _compile(conn, statement).sql


def fetch(conn: Connection, statement: Executable, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """All rows of ``statement`` (module-level, prebuilt) as tuples; [] when it returns none.

    Only for statements whose result columns need no SQLAlchemy type processing (integers,
    strings, booleans), and with every parameter given (no Python-side column defaults are
    applied; an INSERT names exactly the columns in ``params``): rows come back exactly as
    the driver returns them. Bound values go through their types' bind processors (on
    SQLite, a datetime becomes SQLAlchemy's text form).
    """
    assert isinstance(statement, ClauseElement)
    compiled = _compile(conn, statement, params if isinstance(statement, Insert) else ())
    driver = conn.connection.driver_connection
    assert driver is not None
    bound = compiled.params(params)
    try:
        cursor = driver.cursor()
        try:
            cursor.execute(compiled.sql, bound)
            return list(cursor.fetchall()) if cursor.description is not None else []
        finally:
            cursor.close()
    except conn.dialect.dbapi.Error as exc:  # type: ignore[union-attr]
        raise DBAPIError.instance(
            compiled.sql, bound, exc, conn.dialect.dbapi.Error,  # type: ignore[union-attr]
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
