"""Moved to :mod:`tocsin.testing.tansu`; this path stays for existing imports."""
from tocsin.testing.tansu import Tansu, read_topic, tansu_binary  # noqa: F401
