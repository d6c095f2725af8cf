"""The strings and payloads other programs read, each with its one formatter and parser: run
titles, artifact names, the reply marker, dispatch inputs, job outputs, whose runs count.
"""
