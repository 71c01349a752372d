"""The consortium's tools (``fedod-consortium``), run by its data-protection officer, not by a
hospital: the consortium key, the membership certificate of a study's secure rounds
(:mod:`.cli`), and the beacon signature over each round attempt's roster (:mod:`.beacon`).

It ships with the participant package because it speaks the participant's side of the wire
(:mod:`participant.client`); the coordinator never holds the consortium key.
"""
