"""The SQL reading a stored response's ``model`` and ``usage`` counts out of its ``body``.

``GET /v1/usage`` sums the ``model``, ``input_tokens`` and ``output_tokens`` columns every
write of a response fills in (:func:`~stateway.storage.sql.accounting.usage_columns`).
A row stored before they existed, or by an older release's process since (a rolling
upgrade), has them NULL: the sweeps fill them in, a batch at a time, and the usage query
reads such a row's body meanwhile; both read it with these expressions, as
``usage_columns`` reads a state, so a row counts the same either way:

- the model when it is a string, with U+FFFD for each NUL in it (PostgreSQL's text cannot
  hold the character), else ``''`` (never NULL, which marks a row not filled in);
- a count when it is an integer of at most 18 digits (a ``BIGINT`` holds it), else NULL.

PostgreSQL's ``jsonb`` refuses ``\\u0000`` (how orjson writes a NUL in a string), and
SQLite's ``json_extract`` ends the text it returns there: the body is read with each such
escape written ``\\ufffd``. A body that is not JSON (cut short, written by hand) reads as
NULL, as one that is no object reads: no model, no tokens (on PostgreSQL through
``stateway_body``, the cast migration ``0019`` adds, NULL where it fails; on SQLite by
``json_valid``). One such row fails neither the usage query nor the backfill, for anyone.
The expressions name the parsed body ``state``: the column of a subquery parsing it once a
row (:func:`parsed`).
"""

from __future__ import annotations

from typing import Final

_COUNT: Final = "^-?[0-9]{1,18}$"
_STAND_IN: Final = "{character}(1)"
"""U+0001, never in orjson's JSON text, which escapes every control character."""


def parsed(dialect: str, body: str = "body") -> str:
    """The SQL of ``body`` (a column of JSON text) parsed for :func:`fields`: ``jsonb`` on
    PostgreSQL, the text on SQLite; NULL where it is not JSON."""
    if dialect == "postgresql":
        return f"stateway_body({_without_nul(body, 'strpos', 'chr')})"
    return f"CASE WHEN json_valid({body}) THEN {_without_nul(body, 'instr', 'char')} END"


def fields(dialect: str) -> tuple[str, str, str]:
    """The SQL of the model, the input tokens and the output tokens of the parsed body
    ``state``."""
    if dialect == "postgresql":
        model = (
            "CASE WHEN jsonb_typeof(state -> 'model') = 'string' THEN state ->> 'model' ELSE '' END"
        )
        input_tokens, output_tokens = (
            f"CASE WHEN jsonb_typeof(state #> '{{usage,{name}}}') = 'number'"
            f" AND state #>> '{{usage,{name}}}' ~ '{_COUNT}'"
            f" THEN CAST(state #>> '{{usage,{name}}}' AS BIGINT) END"
            for name in ("input_tokens", "output_tokens")
        )
        return model, input_tokens, output_tokens
    model = (
        "CASE WHEN json_type(state, '$.model') = 'text'"
        " THEN json_extract(state, '$.model') ELSE '' END"
    )
    input_tokens, output_tokens = (
        f"CASE WHEN json_type(state, '$.usage.{name}') = 'integer'"
        f" AND json_extract(state, '$.usage.{name}')"
        " BETWEEN -999999999999999999 AND 999999999999999999"
        f" THEN json_extract(state, '$.usage.{name}') END"
        for name in ("input_tokens", "output_tokens")
    )
    return model, input_tokens, output_tokens


def _without_nul(body: str, position: str, character: str) -> str:
    r"""``body``, each ``\u0000`` escape in its strings written ``\ufffd``, the escaped
    backslashes set aside first (as U+0001) so that each one left is an escape:
    ``\\u0000`` is a backslash, then ``u0000``. ``position`` and ``character`` are the
    dialect's ``strpos`` or ``instr``, and ``chr`` or ``char``. Bodies without one, nearly
    all, are read as they are."""
    stand_in = _STAND_IN.format(character=character)
    kept = f"replace({body}, '\\\\', {stand_in})"
    replaced = f"replace(replace({kept}, '\\u0000', '\\ufffd'), {stand_in}, '\\\\')"
    return f"CASE WHEN {position}({body}, '\\u0000') = 0 THEN {body} ELSE {replaced} END"
