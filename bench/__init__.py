"""Tocsin's benchmarks: ``bench/run <name>`` runs ``python -m bench.<name>``; results go to
``bench/results/`` and are written up in ``docs/benchmarks.md``."""
