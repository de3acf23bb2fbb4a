"""PROTOCOL.md documents every message type, error code and event kind the code has,
and documents none that the code lacks (both directions, so neither can drift)."""

from __future__ import annotations

import re
from pathlib import Path

from croupier.core.errors import BY_STATUS
from croupier.core.events import EVENT_TYPES
from croupier.core.wire import HEADER_SIZE, Header, Kind, MsgType

DOC = (Path(__file__).resolve().parents[1] / "PROTOCOL.md").read_text()
# statuses the wire keeps but no server sends (a soft split travels in an OK reply)
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


def test_the_documented_batch_digests_are_the_codes() -> None:
    """PROTOCOL §5.1's examples: keyed by the app key 00..1f, and the unkeyed seal."""
    import blake3

    from croupier.core.batch import FLAG_SEAL
    from croupier.transports.digest import batch_digest
    from croupier.transports.secret import ClusterSecret

    key = bytes(range(32))
    section = _section("5")
    assert key.hex() in section and b"hello".hex() in section
    assert batch_digest(1, 0, 0, 0, b"hello", key).hex() in section
    assert batch_digest(1, 0, 2, FLAG_SEAL, b"", key).hex() in section
    assert batch_digest(1, 0, 2, FLAG_SEAL, b"").hex() in section
    # the derivation the section spells out is the one workers use
    secret = ClusterSecret(bytes(range(32, 64)))
    root = blake3.blake3(secret.raw, derive_key_context="croupier 2026-12-01 app key root v1").digest()
    assert "`croupier 2026-12-01 app key root v1`" in section
    assert blake3.blake3(b"app-1", key=root).digest() == secret.app_key("app-1")
    tagged = blake3.blake3(b"app-1/0123456789abcdef", key=root).digest()
    assert tagged == secret.app_key("app-1", "0123456789abcdef")
    assert "`<app_id>/<key_tag>`" in _section("2") and '"<app_id>/<key_tag>"' in section
    vector = ClusterSecret(bytes(range(32))).app_key("app-1", "0123456789abcdef").hex()
    assert vector in _section("2") and vector in _section("4")


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


def test_the_documented_handles_are_what_the_sdk_makes_and_parses() -> None:
    from croupier._client import APP_HANDLE_PREFIX, HANDLE_PREFIX, parse_app_handle, parse_handle

    text = _section("4")
    assert f"`{HANDLE_PREFIX}:<app_id>:<shuffle_id>:<key>`" in text
    assert f"`{APP_HANDLE_PREFIX}:<app_id>:<key>`" in text
    examples = re.findall(r"`(croupier-(?:shuffle|app)-v1:[A-Za-z0-9._:-]*)`", text)
    assert len(examples) == 2
    assert parse_handle(examples[0]) == ("etl-3fa2", 0, None)
    app_id, key = parse_app_handle(examples[1])
    # the §2.1 test vector's app key of app-1
    assert app_id == "app-1" and key is not None and key.hex() in _section("2")


def test_the_unauthorized_reasons_are_the_codes_and_the_rules_a_client_needs_are_stated() -> None:
    """Issue 22 §3.2-3.5 and §3.7: what a second-language client author had to find out by trial."""
    from croupier.transports.auth import AUTH_REASONS

    section = _section("2")
    documented = re.findall(r"^\| [^|]+ \| `([a-z ]+)` \|$", section, re.M)
    assert documented == list(AUTH_REASONS)
    flat = " ".join(section.split())
    for rule in (
        "`0` in a reply |",  # reply flags
        "A reply never carries an auth frame",
        "**Request ids start at random.**",
        "**Accepted** means that the signature checked",
        "whatever it answers, an error included",
        "The AUTH flag with no frame 2 is a missing credential, not a malformed message: `UNAUTHORIZED`",
        "served as unsigned",
    ):
        assert rule in flat, rule
    assert '`{"pong": true, "term": int, "time_us": int}`' in _section("4")


def test_hard_split_has_one_form_of_partitions() -> None:
    """Issue 22 §3.8: the disk-failure HARD_SPLIT names [[partition, epoch]] like a split."""
    row = DOC[DOC.index("| 4 | `HARD_SPLIT` |") :].split("\n", 1)[0]
    assert "[int]" not in row and row.count('`{"partitions": [[partition, epoch], ...], "reason": str}`') == 1
    assert "the same `details`, plus `failed_worker`" in row
    disk_full = " ".join(_section("5").split())
    assert (
        "`HARD_SPLIT` naming the failed locations as a split does, `[[partition, epoch], ...]`" in disk_full
    )


def test_map_ranges_are_written_as_the_code_reads_them() -> None:
    """Issue 22 §3.10: ranges were called half-open but written ``[lo, hi]``; the code excludes ``hi``."""
    from croupier.core.bitmap import ranges
    from croupier.core.proof import expand_ranges

    flat = " ".join(DOC.split())
    assert "half-open `[lo, hi]`" not in flat and "half-open ranges" not in flat
    assert "`[3, 4]` is map 3 alone, `[0, 2]` maps 0 and 1" in flat
    assert ranges([3]) == ((3, 4),) and ranges([0, 1]) == ((0, 2),)
    assert expand_ranges([[3, 4]]) == {3} and expand_ranges([[0, 2]]) == {0, 1}


def test_a_register_app_repeat_with_another_name_is_a_documented_conflict() -> None:
    """Issue 22 §3.6: the CONFLICT was undocumented."""
    flat = " ".join(DOC.split())
    assert "`CONFLICT` for a repeat of a registered `app_id` with another `name`" in flat
    assert "a `REGISTER_APP` repeat of a registered `app_id` with another `name`" in flat


def test_a_workers_ping_reply_is_documented() -> None:
    """Issue 22 §3.7: a worker's clock too (it checks nonces as the master does)."""
    flat = " ".join(_section("5").split())
    assert "answers `PING` (type 1, on its control port, open to anyone, body `{}`)" in flat
    assert 'with `{"pong": true, "time_us": int}`: its clock' in flat
