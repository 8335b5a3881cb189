"""API keys beyond their value (:class:`tocsin.domain.ApiKey`): minting, hashing and finding
them in a store (:mod:`~tocsin.apikeys.tokens`), and the local admin key file that ``tocsin up``
writes (:mod:`~tocsin.apikeys.keyfile`). Who is calling, per request, is
:mod:`tocsin.api.auth`'s."""

from __future__ import annotations

__all__: list[str] = []
