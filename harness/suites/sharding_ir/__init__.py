"""Sharding IR (hint ops, IR models, sharding passes) and its sharded-vs-unsharded equivalence test.

Kept light: the project's pytest plugin imports ``options`` from here in every pytest run, so
nothing in this package imports torch at module level except the modules that need it.
"""
