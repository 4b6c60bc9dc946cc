"""Statements compiled once to the driver's SQL, for writers that skip SQLAlchemy's
per-call execution machinery.

SQLAlchemy's ``Connection.execute`` looks a statement up in its compiled cache, builds an
execution context and turns every parameter row into the driver's parameters on each
call: for one save of a response and its items (two statements, a handful of rows) that
costs about twice the instructions SQLite itself spends writing them. A
:class:`Prepared` statement does that work once per statement and row shape: the SQL
text, and the order in which a row's values are bound. Running it is the driver's own
``executemany``.

Only what the store's writes use is supported: named bind parameters (optionally with a
fixed value) and types whose bind processors, if any, are applied as SQLAlchemy would.
A statement needing more (expanding ``IN`` lists, literal rendering at execution) is
refused when it is prepared, so a new statement cannot be silently mis-bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

Row = dict[str, Any]
Binder = Callable[[Row], Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Prepared:
    sql: str
    bind: Binder
    """A row's values, in the order the SQL's positional parameters take them."""


class PreparedStatements:
    """Statements prepared for one dialect, each once per row shape."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._prepared: dict[tuple[Executable, tuple[str, ...]], Prepared] = {}

    def get(self, statement: Executable, row: Row) -> Prepared:
        """``statement`` prepared for rows with ``row``'s keys."""
        key = (statement, tuple(row))
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = prepare(statement, key[1], self._dialect)
        return prepared


def prepare(statement: Executable, keys: Sequence[str], dialect: Dialect) -> Prepared:
    """``statement`` compiled for ``dialect`` and rows with ``keys`` (as SQLAlchemy
    compiles it for an execution with such rows)."""
    if not isinstance(statement, ClauseElement):
        raise TypeError(f"not a SQL expression: {statement!r}")
    compiled = statement.compile(dialect=dialect, column_keys=sorted(keys))
    if not isinstance(compiled, SQLCompiler) or compiled.positiontup is None:
        raise ValueError(f"not a positional SQL statement for {dialect.name}: {statement}")
    if compiled.literal_execute_params or compiled.post_compile_params:
        raise ValueError(f"statement renders parameters at execution: {statement}")
    names = tuple(compiled.positiontup)
    present = set(keys)
    fixed = {}
    for name in names:
        if name not in present:
            parameter = compiled.binds[name]
            if parameter.required:
                raise ValueError(f"rows lack the parameter {name!r} of: {statement}")
            fixed[name] = parameter.effective_value
    processors = {
        name: processor
        for name in set(names)
        if (processor := _processor(compiled, name, dialect)) is not None
    }
    return Prepared(str(compiled), _binder(names, fixed, processors))


def _processor(compiled: SQLCompiler, name: str, dialect: Dialect) -> Callable[[Any], Any] | None:
    kind = compiled.binds[name].type
    return kind.dialect_impl(dialect).bind_processor(dialect)


def _binder(
    names: tuple[str, ...], fixed: dict[str, Any], processors: dict[str, Callable[[Any], Any]]
) -> Binder:
    if fixed:
        return partial(_bind_each, names, fixed, processors)
    if not names:
        return _nothing
    if len(names) == 1:
        name = names[0]
        get: Binder = lambda row: (row[name],)  # noqa: E731  # itemgetter of one is no tuple
    else:
        get = itemgetter(*names)
    if not processors:
        return get
    converted = tuple((at, processors[name]) for at, name in enumerate(names) if name in processors)
    return partial(_bind_converted, get, converted)


def _nothing(_row: Row) -> Sequence[Any]:
    """A statement without parameters (a ``DELETE`` of a whole table) binds nothing."""
    return ()


def _bind_converted(
    get: Binder, converted: tuple[tuple[int, Callable[[Any], Any]], ...], row: Row
) -> Sequence[Any]:
    values = list(get(row))
    for at, processor in converted:
        values[at] = processor(values[at])
    return values


def _bind_each(
    names: tuple[str, ...],
    fixed: dict[str, Any],
    processors: dict[str, Callable[[Any], Any]],
    row: Row,
) -> Sequence[Any]:
    values = []
    for name in names:
        value = fixed[name] if name in fixed else row[name]
        processor = processors.get(name)
        values.append(value if processor is None else processor(value))
    return values
