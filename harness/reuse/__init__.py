"""Reuse by dependency key: the key and the import graph it reads, the offers, the trust policy,
the audit, the explanation.
"""
