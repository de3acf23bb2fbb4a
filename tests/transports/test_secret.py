"""The cluster secret file and the keys derived from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zmq

from croupier.core.errors import BadRequest
from croupier.transports.secret import (
    SECRET_ENV,
    ClusterSecret,
    create_secret_file,
    ensure_secret_file,
    load_secret_file,
    secret_file_from_env,
)


def test_created_file_is_private_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "secret"
    made = create_secret_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_secret_file(path) == made
    assert "redacted" in repr(made) and made.raw.hex() not in repr(made)


def test_a_secret_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    first = create_secret_file(path)
    with pytest.raises(FileExistsError):
        create_secret_file(path)
    again, created = ensure_secret_file(path)
    assert (again, created) == (first, False)


def test_keys_are_distinct_and_stable(tmp_path: Path) -> None:
    secret = ClusterSecret(bytes(range(32)))
    keys = {secret.member_key, secret.app_key("a"), secret.app_key("b")}
    assert len(keys) == 3 and all(len(k) == 32 for k in keys)
    assert secret.app_key("a") == ClusterSecret(bytes(range(32))).app_key("a")
    public, private = secret.curve_server_keys()
    assert zmq.curve_public(private) == public and len(public) == 40


@pytest.mark.parametrize(
    ("text", "mode", "match"),
    [
        ("croupier-secret-v1:" + "00" * 32 + "\n", 0o644, "readable by others"),
        ("hello\n", 0o600, "not a Croupier secret"),
        ("croupier-secret-v1:zz\n", 0o600, "not hex"),
        ("croupier-secret-v1:00\n", 0o600, "1 bytes"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path: Path, text: str, mode: int, match: str) -> None:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    with pytest.raises(BadRequest, match=match):
        load_secret_file(path)


def test_env_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "/x")
    assert secret_file_from_env("/given") == "/given"
    assert secret_file_from_env(None) == "/x"
    monkeypatch.delenv(SECRET_ENV)
    assert secret_file_from_env(None) is None
