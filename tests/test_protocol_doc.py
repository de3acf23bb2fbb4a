"""PROTOCOL.md documents every message type, error code and event kind the code has,
and documents none that the code lacks (both directions, so neither can drift)."""

from __future__ import annotations

import re
from pathlib import Path

from croupier.core.errors import BY_STATUS
from croupier.core.events import EVENT_TYPES
from croupier.core.wire import HEADER_SIZE, Header, Kind, MsgType

DOC = (Path(__file__).resolve().parents[1] / "PROTOCOL.md").read_text()
# statuses the wire keeps for errors no server sends yet (a later issue adds them)
RESERVED_ERRORS = {5: "SOFT_SPLIT"}


def _section(number: str) -> str:
    """The text of ``## <number>. ...`` up to the next ``## `` heading."""
    start = DOC.index(f"\n## {number}. ")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


def _rows(text: str) -> list[tuple[int, str, str]]:
    """``(number, name, next cell)`` of every ``| 12 | `NAME` | ... |`` table row."""
    return [
        (int(n), name, rest)
        for n, name, rest in re.findall(r"^\| (\d+) \| `([A-Z_]+)` \| ([^|]*)\|", text, re.M)
    ]


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


def test_every_documented_message_type_is_in_the_code() -> None:
    documented = _rows(_section("4") + _section("5"))
    assert documented, "no message table found in sections 4 and 5"
    for number, name, _ in documented:
        assert name in MsgType.__members__, f"PROTOCOL.md documents {name}, which the code lacks"
        assert int(MsgType[name]) == number, (
            f"{name} is {int(MsgType[name])} in the code, {number} in the doc"
        )
    assert len({name for _, name, _ in documented}) == len(documented) == len(MsgType)


def test_every_documented_error_code_is_in_the_code_or_reserved() -> None:
    documented = _rows(_section("3"))
    assert documented, "no error table found in section 3"
    for status, code, retriable in documented:
        if status in RESERVED_ERRORS:
            assert code == RESERVED_ERRORS[status] and status not in BY_STATUS
            continue
        assert status in BY_STATUS, f"PROTOCOL.md documents error {code}, which the code lacks"
        cls = BY_STATUS[status]
        assert cls.code == code, f"status {status} is {cls.code} in the code, {code} in the doc"
        assert retriable.strip() == ("yes" if cls.retriable else "no"), f"{code}'s retriable column is wrong"
    assert {s for s, _, _ in documented} == set(BY_STATUS) | set(RESERVED_ERRORS)


def test_every_documented_event_kind_is_in_the_code() -> None:
    documented = re.findall(r"^\| `(\w+)` \|", _section("6"), re.M)
    assert sorted(documented) == sorted(EVENT_TYPES)


def test_the_documented_winner_runs_are_what_the_code_reads_and_sends() -> None:
    from croupier.core.proof import WinnerRuns, runs_of
    from tests.core.test_replies import PINNED

    text = _section("4").replace("\n", "")
    assert '"winner_runs":[[0,2,0],[2,3,1],[3,5,0]]' in text.replace(" ", "")
    runs = [[0, 2, 0], [2, 3, 1], [3, 5, 0]]
    assert [WinnerRuns(runs, 6)[m] for m in range(6)] == [0, 0, 1, 0, 0, -1]
    assert [list(r) for r in runs_of([0, 0, 1, 0, 0, -1])] == runs
    # the example reply starts as the pinned GET_LOCATIONS reply does
    pinned = PINNED["get_locations"]
    prefix = pinned[: pinned.index('"locations":')]
    assert '"num_mappers":2,"winner_runs":[[0,1,1],[1,2,0]],"committed":true' in prefix
    assert prefix in text
