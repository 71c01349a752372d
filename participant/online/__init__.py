"""Streaming (online) mode on the participant's side: the engine, its inputs and outputs, its
durable cursor.
"""
