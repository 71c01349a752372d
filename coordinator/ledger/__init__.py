"""The epsilon ledger of the coordinator.

- :mod:`~coordinator.ledger.charge`: the one writer of charges and ledger rows, for every kind
  of release (LSH contributions, secure rounds, online gradients, cohort releases);
- :mod:`~coordinator.ledger.releases`: what the writer takes and gives back;
- :mod:`~coordinator.ledger.checks`: the checks a release passes before it is charged;
- :mod:`~coordinator.ledger.refusals`: releases refused at the cap, as the dashboard lists them;
- :mod:`~coordinator.ledger.views`: the read-only views (``/v1/me``, ``/v1/admin/budget``).
"""
