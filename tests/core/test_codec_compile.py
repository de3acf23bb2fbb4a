"""The compiled fast paths of ``croupier.core.codec`` (``codec_compile``) against the
field-by-field ones, on arbitrary instances and on arbitrary near-valid JSON objects."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from croupier.core import codec
from croupier.core.codec import from_json, to_json
from croupier.core.commands import COMMAND_TYPES, MapperEnd
from croupier.core.errors import BadRequest
from croupier.core.events import EVENT_TYPES
from croupier.core.replies import ShuffleSummary, WorkerAddress

CLASSES = sorted(
    {*COMMAND_TYPES.values(), *EVENT_TYPES.values(), ShuffleSummary, WorkerAddress}, key=lambda c: c.__name__
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _reference(obj: Any) -> Any:
    """What ``to_json`` made field by field before the compiled encoders (the oracle)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if value is None:
                if not f.metadata.get(codec._OMIT_NONE):
                    out[f.name] = None
            else:
                out[f.name] = _reference(value)
        return out
    if isinstance(obj, tuple | list):
        return [_reference(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _reference(v) for k, v in obj.items()}
    return getattr(obj, "value", obj) if not isinstance(obj, int | str | float | bool) else obj


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except BadRequest as exc:
        return "error", str(exc)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_paths_agree_with_the_field_by_field_ones(cls: type, data: st.DataObject) -> None:
    obj = data.draw(st.from_type(cls))
    encoded = to_json(obj)
    # the same keys, in the same order (a signature covers the bytes), at every level
    assert json.dumps(encoded) == json.dumps(_reference(obj))
    # a valid object and a mutated one: the same instance, or the same error with its path
    names = [f.name for f in dataclasses.fields(cls)]
    mutated = dict(encoded)
    change: bool = data.draw(st.booleans())
    if names and change:
        mutated[data.draw(st.sampled_from(names))] = data.draw(JSON)
    if data.draw(st.booleans()):
        mutated[data.draw(st.text(max_size=4))] = data.draw(JSON)
    for body in (encoded, mutated):
        assert _outcome(from_json, cls, body) == _outcome(codec._checked_from_json, cls, body, cls.__name__)


def test_the_fast_decoder_declines_what_it_does_not_check() -> None:
    fast = codec._plan(MapperEnd)[2]
    good = to_json(MapperEnd("app-1", 3, 17, 0, 1, "AQ=="))
    assert fast(good) == MapperEnd("app-1", 3, 17, 0, 1, "AQ==")
    assert fast({**good, "extra": 1}) is None  # an unknown key
    assert fast({k: v for k, v in good.items() if k != "map_id"}) is None  # a missing one
    assert fast({**good, "app_id": "app-\u00e9"}) is None  # non-ASCII: the checked path tests it
    assert fast({**good, "map_id": True}) is None  # a bool is no int
    with pytest.raises(BadRequest, match=r"MapperEnd.map_id: expected an integer, got bool"):
        from_json(MapperEnd, {**good, "map_id": True})
