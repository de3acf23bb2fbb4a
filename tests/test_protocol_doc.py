"""PROTOCOL.md documents every message type, error code and event kind the code has."""

from __future__ import annotations

from pathlib import Path

from croupier.core.errors import BY_STATUS
from croupier.core.events import EVENT_TYPES
from croupier.core.wire import HEADER_SIZE, Header, Kind, MsgType

DOC = (Path(__file__).resolve().parents[1] / "PROTOCOL.md").read_text()


def test_every_message_type_is_documented_with_its_number() -> None:
    for t in MsgType:
        assert f"| {int(t)} | `{t.name}` |" in DOC, f"PROTOCOL.md lacks message type {t.name}"


def test_every_error_code_is_documented_with_its_status() -> None:
    for status, cls in BY_STATUS.items():
        assert f"| {status} | `{cls.code}` |" in DOC, f"PROTOCOL.md lacks error {cls.code}"


def test_every_event_kind_is_documented() -> None:
    for kind in EVENT_TYPES:
        assert f"| `{kind}` |" in DOC


def test_the_documented_example_header_is_what_the_code_sends() -> None:
    example = Header(Kind.REQUEST, MsgType.STATUS, 1).encode()
    assert len(example) == HEADER_SIZE == 20
    assert " ".join(f"{b:02x}" for b in example) in DOC


def test_the_documented_batch_header_is_the_codes() -> None:
    from croupier.core.batch import BATCH_HEADER

    assert BATCH_HEADER.size == 36
    assert f'`struct "{BATCH_HEADER.format}"`' in DOC
