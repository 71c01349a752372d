"""Secure aggregation of integer vectors for a release round (pure protocol code).

Modules: :mod:`.params` (signed cohort parameters, h_min, threshold, word size),
:mod:`.masks` (X25519 + HKDF seeds, ChaCha20 masks mod 2**k), :mod:`.shares` (Shamir shares of
self-mask seeds, sealed per holder), :mod:`.keys` (per-attempt secrets, share-sealing keys),
:mod:`.vector` (the summed vector: LSH tables, then the dense grid), :mod:`.wire` (the binary
frames every member sends: advert, masked, unmask), :mod:`.messages` (the signed JSON messages:
roster, unmask and recover requests, shares answers), :mod:`.roster` (a roster read back and
verified), :mod:`.participant` (up to masking) with :mod:`.answers` (its unmask and recover
answers) and :mod:`.server` (the two sides' checks and computations).
"""
