"""A study's public configuration: what the coordinator signs and every participant verifies.

The typed fields and parameter sections (``params``), the assembled :class:`StudyConfig` and
its derived hash family and grid (``config``), the canonical JSON that is signed
(``canonical``), the Ed25519 signatures, fingerprints and key files (``signing``), the one
rule every delta obeys (``delta_floor``) and the spec files an operator writes to create a
study (``spec``). A change to what a study promises, or to the bytes that are signed, goes
here; import the module you need (``common.study.config``), this package re-exports nothing.
"""
