"""The `bot` console script: the click group (`main`), the options commands share, the command
reference; one module per command in `local/` and `workflow/`.
"""
