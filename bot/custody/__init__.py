"""The bot's custody of the ledger in Actions: which ledger a job may use, its artifacts fetched,
unpacked, checked and recorded.
"""
