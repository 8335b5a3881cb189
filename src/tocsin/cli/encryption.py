"""``tocsin encryption new-key|rotate``: the key that seals channel secrets, and payloads when
``TOCSIN_ENCRYPT_PAYLOADS`` is on, at rest (:mod:`tocsin.sealing`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tocsin.cli.common import call

__all__ = ["encryption_app"]

encryption_app = typer.Typer(no_args_is_help=True, help="The key sealing channel secrets (and "
                                                        "payloads) at rest: make one, rotate "
                                                        "to another.")


@encryption_app.command("new-key")
def new_key_command() -> None:
    """Print a fresh key (32 random bytes, URL-safe base64) for TOCSIN_ENCRYPTION_KEY."""
    from tocsin.sealing import new_key

    typer.echo(new_key())


@encryption_app.command("rotate")
def rotate(
    new: Annotated[str, typer.Option(
        "--new", envvar="TOCSIN_ENCRYPTION_NEW_KEY", show_envvar=False,
        help="The key to seal with from now on (or TOCSIN_ENCRYPTION_NEW_KEY).")],
    old: Annotated[list[str] | None, typer.Option(
        "--old", envvar="TOCSIN_ENCRYPTION_OLD_KEY", show_envvar=False,
        help="A key the secrets are sealed with now (repeat for several; none when the "
             "store holds no sealed secret yet).")] = None,
) -> None:
    """Seal every stored channel secret and sealed payload again with the new key (secrets
    in clear are sealed too, and payloads in clear when TOCSIN_ENCRYPT_PAYLOADS is on). Run it
    with both keys while processes hold the new key as TOCSIN_ENCRYPTION_KEY and the old as
    TOCSIN_ENCRYPTION_OLD_KEYS; then drop the old one."""
    from tocsin.config import Settings
    from tocsin.errors import ValidationError
    from tocsin.sealing import Sealer
    from tocsin.stores import open_store
    from tocsin.stores.sql import SqlStore

    def rotated() -> Any:
        sealer = Sealer(new, old or [])
        settings = Settings()
        store = open_store(settings.store_url, buckets=settings.buckets)
        try:
            if not isinstance(store, SqlStore):
                raise ValidationError("store", "this store keeps no channels")
            store.use_sealer(sealer)
            channels = store.list_channels()
            for spec in channels:
                store.put_channel(spec)
            payloads = store.reseal_payloads(sealer, seal_clear=settings.encrypt_payloads)
        finally:
            store.close()
        return {"channels": len(channels), "payloads": payloads,
                "sealed_with": sealer.current}

    call(rotated)
