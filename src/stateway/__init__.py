"""stateway: the stateful agentic gateway between agent clients and model servers."""

__version__ = "0.1.0"
