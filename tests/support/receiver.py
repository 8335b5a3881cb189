"""Moved to :mod:`tocsin.testing.receiver`; this path stays for existing imports."""
from tocsin.testing.receiver import Behaviour, Received, Receiver  # noqa: F401
