"""The CLI's tenants flags: ``croupier local`` and ``demo`` pass them to their master."""

from __future__ import annotations

from pathlib import Path

from croupier.services.cli import build_parser
from croupier.services.cli._common import _quota_argv, _quota_settings
from tests.core.test_quotas import TENANTS


def test_local_and_demo_pass_the_tenants_file_and_quotas_to_their_master(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(TENANTS)
    local = build_parser().parse_args(["local", "--tenants", str(path), "--max-bytes-stored", "1GiB"])
    assert _quota_argv(local) == ["--tenants", str(path.resolve()), "--max-bytes-stored", "1GiB"]
    master = build_parser().parse_args(["master", *_quota_argv(local)])
    settings = _quota_settings(master)
    assert settings["tenants"].names == ("etl", "adhoc") and settings["max_bytes_stored"] == 1024**3
    demo = build_parser().parse_args(["demo", "--tenants", str(path)])
    assert _quota_argv(demo) == ["--tenants", str(path.resolve())]
