"""``tocsin apikeys create|ls|revoke``: through a running API with an admin key, or with
``--local`` straight on the store named by the settings (to bootstrap the first key of a
deployment that has none: whoever can open the store may mint keys anyway)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tocsin.cli.common import ApiOpt, call, client_for
from tocsin.config import Settings

if TYPE_CHECKING:
    from tocsin.abc import Store

__all__ = ["apikeys_app"]

apikeys_app = typer.Typer(no_args_is_help=True,
                          help="API keys: create (the token is shown once), list, revoke.")

LocalOpt = Annotated[bool, typer.Option(
    "--local", help="Work on the store directly (from TOCSIN_STORE / TOCSIN_HOME), not the API.")]


@contextmanager
def _store() -> Iterator[Store]:
    from tocsin.stores import open_store

    settings = Settings()
    store = open_store(settings.store_url, buckets=settings.buckets)
    try:
        yield store
    finally:
        store.close()


@apikeys_app.command("create")
def create(
    role: Annotated[str, typer.Option(help="admin (every tenant, keys) or tenant.")] = "tenant",
    tenant: Annotated[str | None, typer.Option(help="The tenant of a tenant key.")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Only GET requests.")] = False,
    name: Annotated[str | None, typer.Option(help="A label for people.")] = None,
    local: LocalOpt = False,
    api: ApiOpt = None,
) -> None:
    """Create a key and print it with its token: the only time the token is shown."""
    from tocsin.apikeys.tokens import describe, issue_key
    from tocsin.clock import SystemClock
    from tocsin.domain import Role
    from tocsin.errors import ValidationError

    def made() -> Any:
        try:
            kind = Role(role)
        except ValueError:
            raise ValidationError("role", f"{role!r} is not admin or tenant") from None
        if not local:
            return client_for(api).create_key(kind.value, tenant=tenant, read_only=read_only,
                                           name=name)
        with _store() as store:
            key, token = issue_key(store, role=kind, tenant=tenant, read_only=read_only,
                                   name=name, now_ms=SystemClock().now_ms())
        return describe(key) | {"token": token}

    call(made)
    typer.echo("store the token now: it is not shown again", err=True)


@apikeys_app.command("ls")
def list_keys(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    local: LocalOpt = False,
    api: ApiOpt = None,
) -> None:
    """List keys (ids, roles, tenants; never a token)."""
    from tocsin.apikeys.tokens import describe

    def listed() -> Any:
        if not local:
            return client_for(api).keys(tenant=tenant)
        with _store() as store:
            return [describe(k) for k in store.list_keys(tenant=tenant)]

    call(listed)


@apikeys_app.command("revoke")
def revoke(key_id: str, local: LocalOpt = False, api: ApiOpt = None) -> None:
    """Revoke a key (by its id, ``key_…``): it answers 401 from now on."""
    from tocsin.apikeys.tokens import describe
    from tocsin.clock import SystemClock

    def revoked() -> Any:
        if not local:
            return client_for(api).revoke_key(key_id)
        with _store() as store:
            return describe(store.revoke_key(key_id, now_ms=SystemClock().now_ms()))

    call(revoked)
