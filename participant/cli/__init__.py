"""``fedod-participant``: argument parsers, command bodies and their output
(``fedod-consortium``, the consortium's tools, is :mod:`participant.consortium`).
"""
