"""The independent LSH and grid release: histograms from public seeds, noised, bounded, summed.

Hash families derived from the shared seed (``hashing``, over the SHA-256 stream of
``seeded``), the uniform grid on public bounds (``grid``) and its cell keys of any width
(``cellkeys``); the discrete Laplace release of both histograms (``release``), the bounds an
honest release stays within (``release_bounds``, with the table-total check of
``table_totals``) and the coordinator's exact sum (``merge``). Pure code: no I/O, no clock.
Secure aggregation, cohorts and streaming have packages of their own; import the module you
need (``common.histograms.grid``), this package re-exports nothing.
"""
