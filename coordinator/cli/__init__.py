"""``fedod-coordinator``: the server command and the administrative commands on the deployment's
database.
"""
