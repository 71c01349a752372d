"""A member's ``c_last`` (participant.secagg.files): the beacon draw count it last masked
under, stored in the study's state directory before the masked frame, read back after a
restart, never lowered; a re-sent frame of the same attempt is not a new draw."""

from __future__ import annotations

import pytest

from common.secagg.draws import BEACON_DRAWS, check_gap
from common.secagg.messages import RoundRef, RoundRefused
from participant.secagg.files import RoundFiles, last_draw, record_draw

REF = RoundRef(study_id="s1", round=2, attempt=1)


def test_c_last_is_zero_at_first_then_stored_before_the_frame_and_read_after_a_restart(
        tmp_path):
    study = tmp_path / "studies" / "s1"
    files = RoundFiles(study / "rounds" / "2")
    files.root.mkdir(parents=True)
    assert last_draw(study) == 0

    def make() -> bytes:
        assert last_draw(study) == 5  # durable before the frame is made
        return b"frame"
    assert files.masked_frame(1, "ab" * 32, make, draw=5) == b"frame"
    again = RoundFiles(study / "rounds" / "2")  # a restart: new objects, the same directory
    assert last_draw(study) == 5
    assert again.masked_frame(1, "ab" * 32, lambda: b"other", draw=5) == b"frame"  # re-sent
    check_gap(5, last_draw(study), REF, "h00")  # the same draw again: gap 0
    check_gap(5 + BEACON_DRAWS, last_draw(study), REF, "h00")
    with pytest.raises(RoundRefused, match="aborted too many draws"):
        check_gap(6 + BEACON_DRAWS, last_draw(study), REF, "h00")


def test_c_last_is_never_lowered_and_a_study_without_the_beacon_stores_none(tmp_path):
    record_draw(tmp_path, 7)
    record_draw(tmp_path, 3)
    assert last_draw(tmp_path) == 7
    files = RoundFiles(tmp_path / "other" / "rounds" / "1")
    files.root.mkdir(parents=True)
    files.masked_frame(1, "ab" * 32, lambda: b"frame")
    assert not (tmp_path / "other" / "beacon-draw").exists()
