"""The participant's release path: the checks before any record is read (``policy``), the
local ledger (``ledger``), the exact local counts (``counts``), the one charged-release flow
every kind of release goes through (``flow``) and the independent release's build, store and
send (``contribute``).
"""
