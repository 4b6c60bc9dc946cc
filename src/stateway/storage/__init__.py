"""Storage: implementations of :class:`~stateway.core.ports.ResponseStore`.

The only implementation today is :mod:`stateway.storage.sql`, one code path over SQLite
(the embedded default) and PostgreSQL.
"""
