"""Running a plan on this host: the executor, GPU slots and scheduling, one pytest per shard and
its plug-in, streams, progress, JUnit.
"""
