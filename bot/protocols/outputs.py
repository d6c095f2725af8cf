"""A job's outputs for the workflow: ``key=value`` lines appended to GITHUB_OUTPUT."""

from __future__ import annotations

import click


def write_outputs(path: str | None, outputs: dict[str, str]) -> None:
    """Append ``key=value`` lines to GITHUB_OUTPUT (values are single-line); no file: print."""
    bad = sorted(key for key, value in outputs.items() if "\n" in value)
    if bad:
        raise ValueError(f"workflow outputs are single-line; {', '.join(bad)} holds a newline")
    lines = "".join(f"{key}={value}\n" for key, value in outputs.items())
    if path is None:
        click.echo(lines, nl=False)
        return
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(lines)
