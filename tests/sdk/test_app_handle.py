"""``App.handle()`` and its parser (issue 16 item 4); attaching across processes is in
``integration/test_attach.py``."""

from __future__ import annotations

import pytest

import croupier
from croupier._client import APP_HANDLE_PREFIX, App, parse_app_handle

KEY = bytes(range(32))


def test_an_app_handle_round_trips_its_id_and_key() -> None:
    app = App(None, "etl-0a1b2c3d4e", "etl", KEY, master=None)  # type: ignore[arg-type]
    handle = app.handle()
    assert handle == f"{APP_HANDLE_PREFIX}:etl-0a1b2c3d4e:{KEY.hex()}"
    assert parse_app_handle(handle) == ("etl-0a1b2c3d4e", KEY)


def test_an_app_handle_without_a_secret_has_an_empty_key() -> None:
    app = App(None, "etl-1", "etl", master=None)  # type: ignore[arg-type]
    assert app.handle() == f"{APP_HANDLE_PREFIX}:etl-1:"
    assert parse_app_handle(app.handle()) == ("etl-1", None)


@pytest.mark.parametrize(
    "handle",
    [
        "",
        "etl-1",
        f"croupier-shuffle-v1:etl-1:3:{KEY.hex()}",  # a shuffle handle is not an app handle
        f"{APP_HANDLE_PREFIX}::{KEY.hex()}",
        f"{APP_HANDLE_PREFIX}:etl-1:{KEY.hex()[:-1]}",
        f"{APP_HANDLE_PREFIX}:etl-1:{KEY.hex().upper()}",
    ],
)
def test_a_malformed_app_handle_is_a_bad_request_that_never_repeats_the_key(handle: str) -> None:
    with pytest.raises(croupier.BadRequest) as info:
        parse_app_handle(handle)
    assert KEY.hex()[:-1] not in str(info.value)
    assert KEY.hex().upper()[:-1] not in str(info.value)


def test_attach_rejects_a_malformed_handle_before_any_request() -> None:
    with croupier.connect("tcp://127.0.0.1:1") as client, pytest.raises(croupier.BadRequest):
        client.attach("not a handle")
