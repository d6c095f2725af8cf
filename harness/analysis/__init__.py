"""Failure analysis: the rules (data), evidence, causes, key lines, suspects, flakiness, the
classification.
"""
