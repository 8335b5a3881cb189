"""Property (security review, round two): no tenant name, channel name, ordering key, task key
or header that Tocsin accepts can make a file channel write outside its tenant's folder, or
make a dashboard action address another route or tenant.

Names are drawn from the whole of text (path separators, dots, line breaks, URL syntax, Unicode
look-alikes) and kept when Tocsin's own checks accept them, so what is tested is the
acceptance rule and the use together.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from pathlib import Path
from urllib.parse import urljoin

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jinja2 import meta

from tests.channels.envelopes import envelopes
from tocsin.api.ui.pages import templates
from tocsin.channels import validate_channel_config
from tocsin.channels.file import FileChannel
from tocsin.channels.policy import TENANTS_DIR, DestinationPolicy
from tocsin.domain import DEFAULT_TENANT, ChannelKind, ChannelSpec, Outcome, check_tenant
from tocsin.domain.headers import headers_problem
from tocsin.errors import ValidationError
from tocsin.validation.models import ScheduleIn

_TRICKY = st.sampled_from(["..", ".", "/", "\\", "%2e", "%2f", "?", "#", "&", "=", "\n", "\r",
                           " ", "tenants", "default", "acme", "\u3002", "\uff0e", "\u2024",
                           "\uff0f", "\x00", "~", "$", "{}", "'", '"', "<", ">"])
_TEXT = st.lists(_TRICKY | st.text(min_size=1, max_size=6), min_size=1, max_size=6).map("".join)
_NAMEISH = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
_HEADERS = st.dictionaries(_TEXT | _NAMEISH, _TEXT, max_size=3)
_SETTINGS = settings(max_examples=300, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))


def _accepted_tenant(name: str) -> bool:
    try:
        check_tenant(name)
    except ValidationError:
        return False
    return True


def _accepted_channel(name: str) -> bool:
    try:
        ChannelSpec(name=name, kind=ChannelKind.FILE)
    except ValidationError:
        return False
    return True


def _accepted_schedule(ordering_key: str, key: str, headers: dict[str, str]) -> bool:
    """Whether the API's model takes these (as a task key: ordering key + uniqueness key)."""
    try:
        item = ScheduleIn.model_validate({"channel": "out", "payload": 1, "delay": 60,
                                          "ordering_key": ordering_key, "uniqueness_key": key,
                                          "headers": headers})
    except ValueError:
        return False
    return headers_problem(item.headers) is None


def _inside(path: Path, folder: Path) -> bool:
    return os.path.commonpath([path, folder]) == str(folder)


@_SETTINGS
@given(tenant=_TEXT | _NAMEISH, channel=_TEXT | _NAMEISH, path=st.none() | _TEXT | _NAMEISH,
       ordering_key=_TEXT, key=_TEXT, headers=_HEADERS)
def test_a_file_channel_writes_only_in_its_tenants_folder(
        tenant: str, channel: str, path: str | None, ordering_key: str, key: str,
        headers: dict[str, str]) -> None:
    assume(_accepted_tenant(tenant) and _accepted_channel(channel))
    assume(_accepted_schedule(ordering_key, key, headers))
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        policy = DestinationPolicy.build(file_roots=[root])
        config = {} if path is None else {"path": path}
        try:
            validate_channel_config(ChannelKind.FILE, config, policy, tenant=tenant)
        except ValidationError:
            assume(False)
        spec = ChannelSpec(name=channel, kind=ChannelKind.FILE, config=config, tenant=tenant)
        batch = [e._replace(tenant=tenant, ordering_key=ordering_key, key=key,
                            headers=headers) for e in envelopes(2)]
        results = FileChannel(spec, policy=policy).send(batch)
        assert {r.outcome for r in results} == {Outcome.DELIVERED}, results
        written = [p for p in Path(scratch).rglob("*") if p.is_file()]
        assert len(written) == 1
        own = root if tenant == DEFAULT_TENANT else root / TENANTS_DIR / tenant
        assert _inside(written[0], own), (written[0], own)
        if tenant == DEFAULT_TENANT:
            assert not _inside(written[0], root / TENANTS_DIR)


_BUTTON = re.compile(r"""hx-post="([^"]*)" hx-vals='([^']*)'""")


def _clicks(page: str, rows: list[object], **ctx: object) -> list[tuple[str, dict[str, str]]]:
    """Every action button of ``page`` rendered with ``rows``: the path a browser posts to
    (resolved against the page's URL, the fragment dropped) and the JSON body it sends. Any
    other table the page looks rows up in (held channels, lateness...) is empty."""
    env = templates.env
    source = env.loader.get_source(env, page)[0] if env.loader else ""
    lookups: dict[str, object] = {name: {} for name in meta.find_undeclared_variables(
        env.parse(source))}
    text = env.get_template(page).render({**lookups, "rows": rows, "title": "t", "here": "",
                                          "csrf": "c", "tenant": None, **ctx})
    base = f"http://tocsin.example/ui/{page.removesuffix('.html')}"
    return [(urljoin(base, html.unescape(url)).split("#", 1)[0].removeprefix(
        "http://tocsin.example"), json.loads(html.unescape(vals)))
        for url, vals in _BUTTON.findall(text)]


class _Halted:
    def __init__(self, tenant: str, ordering_key: str) -> None:
        self.tenant, self.ordering_key = tenant, ordering_key
        self.schedule_id, self.halted_ms, self.reason = "01J0000000000000000000000", 0, None


@_SETTINGS
@given(tenant=_TEXT | _NAMEISH, ordering_key=_TEXT, channel=_TEXT | _NAMEISH)
def test_a_dashboard_action_addresses_only_its_own_row(tenant: str, ordering_key: str,
                                                       channel: str) -> None:
    assume(_accepted_tenant(tenant) and _accepted_schedule(ordering_key, "u", {}))
    [(url, body)] = _clicks("keys.html", [_Halted(tenant, ordering_key)])
    assert url == "/ui/keys/resume"
    assert body == {"ordering_key": ordering_key, "tenant": tenant}
    assume(_accepted_channel(channel))
    row = {"tenant": tenant, "name": channel, "kind": "file", "config": {}}
    for paused in ({}, {(tenant, channel): type("P", (), {"paused_ms": 0})()}):
        [(url, body)] = _clicks("channels.html", [row], paused=paused)
        assert url == f"/ui/channels/{'resume' if paused else 'pause'}"
        assert body == {"name": channel, "tenant": tenant}
