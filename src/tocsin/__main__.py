"""``python -m tocsin`` is the ``tocsin`` command."""

from tocsin.cli import main

main()
