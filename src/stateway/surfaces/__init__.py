"""Surfaces: transports only. They build commands and call ``Gateway.execute``."""
