"""Rows found across tenants, grouped by tenant: every table is keyed by ``tenant_id``
first (:mod:`~stateway.storage.sql.schema`), so a statement over rows a search found
names one tenant and that tenant's ids (``tenant_id = :tenant AND id IN :ids``), which the
primary key serves."""

from __future__ import annotations

from collections.abc import Iterable


def ids_by_tenant(keys: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The ids of ``keys`` (``(tenant, id)`` pairs), by tenant, each in the order found."""
    grouped: dict[str, list[str]] = {}
    for tenant, id_ in keys:
        grouped.setdefault(tenant, []).append(id_)
    return grouped
