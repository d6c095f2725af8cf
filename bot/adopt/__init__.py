"""Adopting stagebot in a repository: `bot init`'s files, the generated workflows, `bot doctor`'s
checks.
"""
