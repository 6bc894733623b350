"""Checks on user-written SQL before it runs: one SELECT statement, or one expression.

The sandboxed connection (:func:`aifab.data.lake.connect` with ``sandboxed=True``) stops reads
and writes outside the workspace; these checks stop the statements that could write inside it
(``COPY`` over a lake object, ``ATTACH``, ``SET``...) and a second statement smuggled in
through an expression such as ``1); DROP ...``. Both parse with DuckDB's own parser.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from aifab.core.errors import InvalidInputError, first_line

_PROBE = "__aifab_expr"
#: Parts of a parsed ``SELECT (<expr>) FROM __aifab_expr`` that must stay empty.
_EMPTY_PARTS = ("where_clause", "having", "qualify", "sample")


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _statements(sql: str, where: str) -> list[Any]:
    try:
        return duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise InvalidInputError(f"{_prefix(where)}SQL error: {first_line(exc)}") from None


def check_select(sql: str, where: str) -> str:
    """Return ``sql`` if it is a single read-only SELECT (or WITH/FROM/VALUES) statement.

    ``where`` prefixes error messages (none when empty).

    Raises:
        InvalidInputError: it does not parse, holds several statements, or is another kind
            (COPY, EXPORT, ATTACH, INSTALL, LOAD, SET, PRAGMA, CREATE...).
    """
    statements = _statements(sql, where)
    kinds = [s.type.name for s in statements]
    if kinds != ["SELECT"]:
        got = ", ".join(kinds) or "nothing"
        raise InvalidInputError(f"{_prefix(where)}expected a single SELECT statement, got {got}")
    return sql


def _parse_tree(sql: str, where: str) -> dict[str, Any]:
    con = duckdb.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0]
    finally:
        con.close()
    tree: dict[str, Any] = json.loads(raw)
    if tree.get("error"):
        raise InvalidInputError(f"{where}: SQL error: {tree.get('error_message', 'bad SQL')}")
    return tree


def _is_plain_projection(tree: dict[str, Any]) -> bool:
    """Whether ``tree`` is exactly ``SELECT <one item> FROM __aifab_expr``."""
    statements = tree.get("statements", [])
    if len(statements) != 1:
        return False
    node = statements[0].get("node", {})
    source = node.get("from_table") or {}
    return (
        node.get("type") == "SELECT_NODE"
        and len(node.get("select_list", [])) == 1
        and source.get("type") == "BASE_TABLE"
        and source.get("table_name") == _PROBE
        and not node.get("modifiers")
        and not node.get("cte_map", {}).get("map")
        and not node.get("group_expressions")
        and all(node.get(k) is None for k in _EMPTY_PARTS)
    )


def check_expression(expr: str, where: str) -> str:
    """Return ``expr`` in parentheses if it is one SQL expression and nothing more.

    The expression is parsed inside ``SELECT (<expr>) FROM <probe>``; anything that closes the
    parenthesis to add clauses, set operations or statements changes that shape and is refused.
    Subqueries inside the expression stay allowed (they run on the sandboxed connection).

    Raises:
        InvalidInputError: it does not parse or is more than one expression.
    """
    probe = f"SELECT (\n{expr}\n) FROM {_PROBE}"
    what = f"{where}: expected one SQL expression"
    statements = _statements(probe, what)
    if len(statements) != 1 or not _is_plain_projection(_parse_tree(probe, what)):
        raise InvalidInputError(
            f"{what}, got more (a closing parenthesis, a clause or a second statement): {expr!r}"
        )
    return f"(\n{expr}\n)"
