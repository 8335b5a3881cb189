"""A database connection that keeps what is run on it: for tests of how many statements, and
which, a store's call makes."""

from __future__ import annotations

from typing import Any


class StatementLog:
    """Wraps a sqlite3 or psycopg connection: every statement run through it is kept with its
    arguments (``statements``), and ``steps`` counts the executions, one per ``execute`` and
    one per row of ``executemany`` (each a step of its own, the GIL let go and taken back)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[tuple[str, tuple[Any, ...]]] = []
        self.steps = 0

    def execute(self, sql: str, args: Any = ()) -> Any:
        self.statements.append((sql, tuple(args)))
        self.steps += 1
        return self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: Any) -> Any:
        rows = list(rows)
        self.statements.extend((sql, tuple(row)) for row in rows)
        self.steps += len(rows)
        return self.conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)
