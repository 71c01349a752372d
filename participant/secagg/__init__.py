"""A participant's secure aggregation rounds: the round itself (``round``), this member's
charged noisy vector (``vector``), its roster checks (``checks``) and its durable files
(``files``).
"""
