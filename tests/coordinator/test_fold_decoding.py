"""The fold decodes stored contributions on threads: in order, a bounded number ahead, and a
corrupt stored payload still stops the fold with its own error."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from common.errors import PayloadInvalid
from common.study.config import StudyConfig
from common.wire.encoding import encode_counts, validated_json
from coordinator.services import aggregate


class _Config:
    """The two attributes :func:`aggregate.decode_stored` reads of a study config."""

    lsh_cells = 50
    grid = None


def _rows(n: int, pulled: list[int]) -> Iterator[tuple[str, str | None]]:
    for i in range(n):
        pulled.append(i)
        yield validated_json(encode_counts(np.full(50, i), n_cells=50)), None


def test_decoded_rows_come_back_in_order_with_few_decoded_ahead() -> None:
    pulled: list[int] = []
    config: StudyConfig = _Config()  # type: ignore[assignment]
    for i, (lsh, grid) in enumerate(aggregate._decoded(config, _rows(40, pulled))):
        assert lsh[0] is None and grid is None
        np.testing.assert_array_equal(lsh[1], np.full(50, i))
        assert len(pulled) - i <= aggregate.DECODERS + 1  # rows read ahead of the caller
    assert len(pulled) == 40


def test_a_corrupt_stored_payload_stops_the_fold() -> None:
    config: StudyConfig = _Config()  # type: ignore[assignment]
    enc = encode_counts(np.ones(50, dtype=np.int64), n_cells=50)
    good, bad = validated_json(enc), validated_json(enc.model_copy(update={"sha256": "0" * 64}))
    rows = iter([(good, None), (bad, None), (good, None)])
    with pytest.raises(PayloadInvalid, match="sha256"):
        list(aggregate._decoded(config, rows))
