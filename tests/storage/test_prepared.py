"""Statements compiled once for the SQLite writer bind rows as SQLAlchemy would."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, bindparam, insert, select
from sqlalchemy.dialects import sqlite

from stateway.storage.sql import queries
from stateway.storage.sql.conversation_queries import CLAIM, INSERT_TURN_RESPONSE
from stateway.storage.sql.prepared import PreparedStatements, prepare

DIALECT = sqlite.dialect()  # type: ignore[no-untyped-call]
_table = Table("t", MetaData(), Column("a", Integer), Column("b", String), Column("at", DateTime))


def test_an_insert_lists_the_rows_columns_and_binds_them_in_that_order() -> None:
    prepared = prepare(insert(_table), ["b", "a"], DIALECT)
    assert prepared.sql == "INSERT INTO t (a, b) VALUES (?, ?)"
    assert tuple(prepared.bind({"b": "x", "a": 1})) == (1, "x")


def test_a_single_parameter_still_binds_a_sequence() -> None:
    prepared = prepare(insert(_table), ["a"], DIALECT)
    assert tuple(prepared.bind({"a": 7})) == (7,)


def test_a_parameter_used_twice_is_bound_twice() -> None:
    """A turn's row: its tenant and id are both inserted and checked against the claim."""
    keys = ["tenant_id", "id", "conversation_id", "previous_response_id", "status"]
    keys += ["created_at", "deleted_at", "body", "owner", "served_by", "model"]
    keys += ["input_tokens", "output_tokens"]
    prepared = prepare(INSERT_TURN_RESPONSE, keys, DIALECT)
    row = {key: key.upper() for key in keys} | {"created_at": 1.5, "deleted_at": None}
    row |= {"input_tokens": 3, "output_tokens": None}
    values = tuple(prepared.bind(row))
    assert prepared.sql.count("?") == len(values)
    assert values.count("TENANT_ID") == 2
    assert values.count("ID") == 2


def test_the_types_bind_processors_apply() -> None:
    """Both with the values taken whole and one by one (a fixed parameter beside)."""
    prepared = prepare(insert(_table), ["a", "at"], DIALECT)
    assert tuple(prepared.bind({"a": 1, "at": datetime(2026, 1, 2, 3, 4, 5)})) == (
        1,
        "2026-01-02 03:04:05.000000",
    )


def test_a_fixed_parameter_needs_no_row_value() -> None:
    statement = select(_table.c.a).where(
        _table.c.b == bindparam("b", value="fixed"),
        _table.c.at == bindparam("at", type_=DateTime),
        _table.c.a == bindparam("a", type_=Integer),
    )
    prepared = prepare(statement, ["at", "a"], DIALECT)
    assert tuple(prepared.bind({"at": datetime(2026, 1, 2), "a": 3})) == (
        "fixed",
        "2026-01-02 00:00:00.000000",
        3,
    )


def test_a_statement_without_parameters_binds_nothing() -> None:
    """A write probe clears its table."""
    prepared = prepare(queries.CLEAR_PROBES, [], DIALECT)
    assert prepared.sql == "DELETE FROM write_probes"
    assert tuple(prepared.bind({})) == ()


def test_a_missing_required_parameter_is_refused_when_prepared() -> None:
    with pytest.raises(ValueError, match="'seen'"):
        prepare(CLAIM, ["tenant", "conversation", "response"], DIALECT)


def test_parameters_rendered_at_execution_are_refused() -> None:
    expanding = select(_table.c.a).where(_table.c.b.in_(bindparam("bs", expanding=True)))
    with pytest.raises(ValueError, match="at execution"):
        prepare(expanding, ["bs"], DIALECT)


def test_the_stores_writes_prepare() -> None:
    keys = ["tenant", "response", "new_status", "new_body", "new_served_by"]
    keys += ["new_model", "new_input_tokens", "new_output_tokens"]
    prepared = prepare(queries.FINISH_RESPONSE, keys, DIALECT)
    assert prepared.sql.startswith("UPDATE responses SET")
    assert len(tuple(prepared.bind(dict.fromkeys(keys, "v")))) == prepared.sql.count("?")


def test_a_statement_is_prepared_once_per_row_shape() -> None:
    statement = insert(_table)
    statements = PreparedStatements(DIALECT)
    first = statements.get(statement, {"a": 1, "b": "x"})
    assert statements.get(statement, {"a": 2, "b": "y"}) is first
    other = statements.get(statement, {"a": 2})
    assert other is not first
    assert other.sql == "INSERT INTO t (a) VALUES (?)"


def test_a_dialect_with_named_parameters_is_refused() -> None:
    named = sqlite.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
    with pytest.raises(ValueError, match="not a positional SQL statement for sqlite"):
        prepare(insert(_table), ["a"], named)


def test_what_is_not_a_sql_expression_is_refused() -> None:
    with pytest.raises(TypeError, match="not a SQL expression"):
        prepare(object(), ["a"], DIALECT)  # type: ignore[arg-type]
