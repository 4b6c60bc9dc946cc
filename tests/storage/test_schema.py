"""Tenant data is keyed by ``tenant_id`` first: every table holding a tenant's rows starts
its primary key with it, and each of its foreign keys carries it, so no row is named, and
no row reaches another, without its tenant. (The migrated schema is this metadata:
``test_migrations.py``.)"""

from __future__ import annotations

import pytest
from sqlalchemy import Table

from stateway.storage.sql.schema import metadata

PROCESS_TABLES = frozenset({"gateway_secrets", "run_owners", "write_probes"})
"""The process's own rows, no tenant's: keys shared by every process on the database, the
processes' leases, the probe of a database taking writes."""

FOUND_BEFORE_THEIR_TENANT = frozenset({"api_keys"})
"""Rows looked up before their tenant is known: a presented key, by its digest, tells the
tenant (its row still holds it)."""

TENANT_TABLES = sorted(
    set(metadata.tables) - PROCESS_TABLES - FOUND_BEFORE_THEIR_TENANT,
)


@pytest.mark.parametrize("name", TENANT_TABLES)
def test_a_tenants_table_is_keyed_by_tenant_first(name: str) -> None:
    table: Table = metadata.tables[name]
    assert next(iter(table.primary_key.columns)).name == "tenant_id"


@pytest.mark.parametrize("name", TENANT_TABLES)
def test_a_tenants_row_refers_only_to_rows_of_its_tenant(name: str) -> None:
    for key in metadata.tables[name].foreign_key_constraints:
        pairs = {
            (column.name, element.column.name)
            for column, element in zip(key.columns, key.elements, strict=True)
        }
        assert ("tenant_id", "tenant_id") in pairs, f"{name}: {key.name}"


def test_the_tables_left_out_are_there_and_a_key_still_names_its_tenant() -> None:
    assert set(metadata.tables) >= PROCESS_TABLES | FOUND_BEFORE_THEIR_TENANT
    for name in FOUND_BEFORE_THEIR_TENANT:
        assert "tenant_id" in metadata.tables[name].columns
