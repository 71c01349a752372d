"""The compact member view (common.secagg.view): signed round messages are served without the
fields a member knows; the member puts its own values back, and a coordinator that signed
other values is refused exactly as before."""

from __future__ import annotations

import pytest
from secagg_kit import DIGEST, Cohort

from common.secagg import participant as p
from common.secagg import server as s
from common.secagg import view
from common.secagg.messages import RecoverBody, RoundRefused, SignatureInvalid, open_message
from common.secagg.schemas import RoundState


def _known(cohort: Cohort, **over):
    fields = dict(config_digest=DIGEST, modulus_bits=cohort.k, degree=cohort.params.degree,
                  threshold=cohort.params.threshold)
    return {**fields, **over}


def test_compact_messages_complete_to_the_signed_bytes_and_are_smaller() -> None:
    cohort = Cohort.make(12, max_dropouts=2)
    roster = cohort.publish()
    request = s.build_request(cohort.server_roster(), 12, cohort.coordinator)
    recover = s.build_recover(cohort.server_roster(), ["h03"], cohort.coordinator)
    served = RoundState(round=1, attempt=1, status="recover", roster=view.compact(roster),
                        request=view.compact(recover), inbox={"h03": "x"})
    assert len(view.compact(roster).payload) < len(roster.payload) - 100
    for name in ("study_id", "config_digest", "degree", "threshold", "size", "round"):
        assert f'"{name}"' not in view.compact(roster).payload
    assert view.compact(recover).payload == "{}"  # every field of it is known to the member
    done = view.complete_state(served, study="s1", **_known(cohort))
    assert done.roster == roster and done.request == recover
    assert done.roster_digest == roster.digest()
    unmask = view.complete_state(served.model_copy(update={
        "roster": None, "request": view.compact(request), "status": "unmask", "inbox": {}}),
        study="s1", known_roster=roster.digest(), **_known(cohort))
    assert unmask.request == request and unmask.roster_digest == roster.digest()


@pytest.mark.parametrize("wrong", [dict(config_digest="cd" * 32), dict(degree=4),
                                   dict(threshold=2), dict(modulus_bits=31)])
def test_a_member_with_other_config_values_refuses_the_completed_roster(wrong) -> None:
    cohort = Cohort.make(12, max_dropouts=2)
    roster = cohort.publish()
    served = RoundState(round=1, attempt=1, status="masking", roster=view.compact(roster))
    completed = view.complete_state(served, study="s1", **_known(cohort, **wrong)).roster
    assert completed is not None and completed.signature == roster.signature
    m = cohort.members["h00"]
    with pytest.raises((SignatureInvalid, RoundRefused)):
        p.check_roster(completed, me="h00", my_advert=m.advert,
                       coordinator_key=cohort.coordinator.public_key(), ref=cohort.ref,
                       params=cohort.params, config_digest=DIGEST, modulus_bits=cohort.k,
                       identities=cohort.identities(), adverts=cohort.served("h00", roster))


def test_a_recover_request_for_other_lost_members_than_the_inbox_does_not_verify() -> None:
    cohort = Cohort.make(12, max_dropouts=2)
    roster = cohort.publish()
    recover = s.build_recover(cohort.server_roster(), ["h03", "h04"], cohort.coordinator)
    served = RoundState(round=1, attempt=1, status="recover", request=view.compact(recover),
                        inbox={"h03": "x"})  # the member was handed one share, asked for two
    done = view.complete_state(served, study="s1", known_roster=roster.digest(),
                               **_known(cohort))
    assert done.request is not None and done.request.payload != recover.payload
    with pytest.raises(SignatureInvalid):
        open_message(done.request, "recover", RecoverBody, cohort.coordinator.public_key())


def test_a_known_field_must_be_given() -> None:
    cohort = Cohort.make(6)
    with pytest.raises(TypeError):
        view.complete(view.compact(cohort.publish()), study_id="s1", round=1, attempt=1)
