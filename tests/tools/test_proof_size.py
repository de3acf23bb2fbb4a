"""``croupier.tools.proof_size`` on small shapes: the report's fields are there and consistent."""

from __future__ import annotations

from croupier.tools.proof_size import measure


def test_declared_partitions_cost_some_log_bytes_and_dense_shuffles_share_one_bitmap() -> None:
    dense = measure(200, 20, None)
    sparse = measure(200, 20, 3)
    for row in (dense, sparse):
        assert row["log_bytes"] > row["log_bytes_v1"] > 0
        assert row["snapshot_bytes"] > 0 and row["maps_json_bytes"] > 0
    assert dense["maps_json_bytes"] == len("[" + ",".join(["[[0,200]]"] * 20) + "]")
    assert sparse["state_bytes"] > dense["state_bytes"]  # one shared bitmap against 200 of them
