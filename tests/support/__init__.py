"""Servers and helpers shared by test modules and benchmark scripts."""
