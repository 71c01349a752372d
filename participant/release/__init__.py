"""The release path of an independent (non-secure) release: the privacy policy, the local ledger,
build, store and send.
"""
