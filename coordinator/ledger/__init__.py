"""The epsilon ledger: the checks a release passes before it is charged, the charge itself,
refusals, and the read-only views.
"""
