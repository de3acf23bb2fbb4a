"""``croupier worker``'s throttling flags become ``WorkerConfig`` settings."""

from __future__ import annotations

from pathlib import Path

from croupier.core.config import WorkerConfig
from croupier.services.cli import build_parser
from croupier.services.cli.worker import worker_config


def _config(*flags: str) -> WorkerConfig:
    return worker_config(build_parser().parse_args(["worker", "--master", "tcp://127.0.0.1:1", *flags]))


def test_the_defaults_are_the_configs() -> None:
    config = _config()
    default = WorkerConfig()
    assert (
        (config.throttle_window, config.throttle_floor, config.throttle_z)
        == (
            default.throttle_window,
            default.throttle_floor,
            default.throttle_z,
        )
        == (300.0, 200_000_000, 3.0)
    )


def test_the_throttle_flags() -> None:
    config = _config("--throttle-window", "30s", "--throttle-floor", "50MB", "--throttle-z", "4.5")
    assert (config.throttle_window, config.throttle_floor, config.throttle_z) == (30.0, 50_000_000, 4.5)
    assert _config("--no-throttle").throttle_window == 0.0
    assert _config("--throttle-window", "0").throttle_window == 0.0


def test_a_zero_window_turns_throttling_off(tmp_path: Path) -> None:
    from croupier.services.worker import WorkerService

    assert WorkerService("tcp://127.0.0.1:1", [tmp_path], config=_config("--no-throttle")).throttle is None
    assert WorkerService("tcp://127.0.0.1:1", [tmp_path], config=_config()).throttle is not None
