"""What travels between participant and coordinator: the REST models and the count encoding.

The pydantic models of the ``/v1`` API (``schemas``), the base64 and zlib encoding of count
vectors with their digests (``encoding``) and the bounded inflation that decodes them without
a zip bomb (``inflate``). A change here changes bytes on the wire, so old and new peers must
still agree; import the module you need (``common.wire.schemas``), this package re-exports
nothing.
"""
