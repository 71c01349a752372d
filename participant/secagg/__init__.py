"""A participant's secure aggregation rounds: the round itself, its roster checks and its durable
files.
"""
