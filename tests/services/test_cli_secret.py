"""``croupier secret`` and how member commands find the cluster secret (docs/guides/security.md)."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from croupier.services import cli
from croupier.services.cli import _common
from croupier.transports.secret import SECRET_ENV, load_secret_file


@pytest.fixture(autouse=True)
def _no_ambient_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_secret_creates_a_private_file_and_prints_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s" / "secret"
    assert cli.main(["secret", str(path)]) == 0
    assert capsys.readouterr().out.strip() == str(path.resolve())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    load_secret_file(path)
    assert cli.main(["secret", str(path)]) == 1  # never overwritten
    assert "exists" in capsys.readouterr().err


def test_a_master_makes_one_in_its_data_dir_and_the_others_need_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = argparse.Namespace(secret_file=None)
    made = _common._secret(args, str(tmp_path / "data"))
    assert load_secret_file(tmp_path / "data" / "secret") == made
    assert _common._secret(args, str(tmp_path / "data")) == made  # found again, not replaced
    with pytest.raises(ValueError, match="--secret-file"):
        _common._secret(args)  # a worker or admin with none, and no master here
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "data" / "secret"))
    assert _common._secret(args) == made
    assert _common._secret(argparse.Namespace(secret_file=str(tmp_path / "data" / "secret"))) == made


def test_a_worker_without_a_secret_exits_2_and_says_how(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["worker", "--master", "tcp://127.0.0.1:1", "--dirs", "/nonexistent-dir"]) == 2
    assert "--secret-file" in capsys.readouterr().err
