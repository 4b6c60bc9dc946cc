"""Backends: one adapter per upstream API *shape*, implementing ``core.backend.Backend``.

Each knows its upstream wire and nothing about storage or clients. Vendors are rows of
configuration, not modules.
"""
