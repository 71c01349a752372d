"""``fedod-participant`` and ``fedod-consortium``: argument parsers, command bodies and their
output.
"""
