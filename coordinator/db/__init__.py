"""The coordinator's database: engine and sessions, every ORM table, migrations, SQLite's writer
lock and checkpoints.
"""
