"""Secure aggregation rounds on the coordinator: thin shells around :mod:`common.secagg`.

- :mod:`.rounds` the round state machine (open, messages, admin advance and abort);
- :mod:`.phases` what ends each phase (roster, recovery request, reveal and merge);
- :mod:`.store` the rows: identity keys, membership certificates, round messages, charges;
- :mod:`.beacon` the consortium's beacon signature between keys and masking;
- :mod:`.auto` opening a round by itself once every member has registered;
- :mod:`.views` what a member and the admin see of a round.
"""
