"""A test hook, for Python processes started with this directory on their ``PYTHONPATH`` (a
``tocsin dispatcher`` and the Spark workers it starts): building a webhook channel whose URL
holds ``/slow-build`` blocks for :data:`BUILD_S` first, as a Kafka or RabbitMQ channel's build
does while its broker's name takes seconds to resolve. The next ``sitecustomize`` on the path
(Tocsin's own, for Spark's processes) still runs, first."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

BUILD_S = 5.0


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    this = sys.modules.pop(__name__)
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.modules[__name__] = this


def _slow_builds() -> None:
    from tocsin.channels import webhook

    built = webhook.WebhookChannel.__init__

    def slow(self: Any, spec: Any, **kwargs: Any) -> None:
        if "/slow-build" in str(spec.config.get("url", "")):
            time.sleep(BUILD_S)
        built(self, spec, **kwargs)

    webhook.WebhookChannel.__init__ = slow  # type: ignore[method-assign]
    webhook.WebhookChannel.quick_build = False  # as a broker's channel: its build may wait


_chain()
_slow_builds()
