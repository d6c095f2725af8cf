"""The pipeline ledger (SQLite), split by what it keeps: ``book`` (the Ledger and its API),
``schema`` (the tables, their migrations), ``store`` (opening, transactions, errors),
``pipelines``, ``tests`` (shards and tests), ``keys`` (the dependency keys, reuse faults),
``location`` (where a repository's ledger and outputs live by default: outside it).
"""
