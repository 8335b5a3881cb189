"""Moved to :mod:`tocsin.testing.api_server`; this path stays for existing imports."""
from tocsin.testing.api_server import ApiServer, free_port  # noqa: F401
