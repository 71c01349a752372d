"""Private cohort rounds on the participant's side, and the cohort columns of a score file."""
