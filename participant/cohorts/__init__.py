"""Private cohort rounds on the participant's side (the released model's score columns are in
:mod:`participant.scoring.cohorts`).
"""
