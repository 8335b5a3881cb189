"""Moved to :mod:`tocsin.testing.processes`; this path stays for existing imports."""
from tocsin.testing.processes import descendants, executor_jvms, kill_tree, start_tocsin  # noqa: F401
