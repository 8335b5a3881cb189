"""The ``tocsin`` command (:mod:`tocsin.cli.app`): one module per group of verbs over the
shared options and helpers of :mod:`tocsin.cli.common`; :mod:`tocsin.cli.output` prints,
:mod:`tocsin.cli.runner` runs ``tocsin up``."""

from __future__ import annotations

from tocsin.cli.app import app, main

__all__ = ["app", "main"]
