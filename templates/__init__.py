"""Jinja2 templates: bot replies, the help text and the CI reports."""

from __future__ import annotations

from functools import cache
from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent


@cache
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, **context) -> str:
    """Render ``templates/<name>`` with ``context``; an unknown variable is an error."""
    return _environment().get_template(name).render(**context)
