"""``fedod-simulate``: the whole system on one machine as real processes (coordinator, hospitals,
reviewer), and its report.
"""
