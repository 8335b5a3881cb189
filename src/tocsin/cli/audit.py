"""``tocsin audit``: the audit log, through a running API with an admin key, or with
``--local`` straight on the store."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tocsin.cli.common import ApiOpt, call, client_for
from tocsin.config import Settings

__all__ = ["audit"]


def audit(
    tenant: Annotated[str | None, typer.Option(help="Changes in this tenant.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="Changes made with this key id.")
                   ] = None,
    action: Annotated[str | None, typer.Option(
        help="Actions starting with this, e.g. 'POST /v1/channels' or DELETE.")] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339: at or after.")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339: before.")] = None,
    limit: Annotated[int, typer.Option(help="Most entries shown.")] = 100,
    local: Annotated[bool, typer.Option("--local", help="Read the store directly.")] = False,
    api: ApiOpt = None,
) -> None:
    """Who changed what, when and from where: channels, keys, policies, rules, tenants,
    pauses, bulk operations, re-drives (oldest first)."""

    def listed() -> Any:
        if not local:
            return client_for(api).audit(tenant=tenant, key_id=key, action=action,
                                         since=since, until=until, limit=limit)["items"]
        from tocsin.api.audit import audit_out
        from tocsin.stores import open_store
        from tocsin.validation.parsing import parse_instant

        settings = Settings()
        store = open_store(settings.store_url, buckets=settings.buckets)
        try:
            found = store.list_audit(
                tenant=tenant, key_id=key, action=action,
                since_ms=parse_instant(since, "since") if since else None,
                until_ms=parse_instant(until, "until") if until else None, limit=limit)
        finally:
            store.close()
        return [audit_out(e) for e in found]

    call(listed)
