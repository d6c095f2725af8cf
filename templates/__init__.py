"""Jinja2 templates: bot replies, the help text and the CI reports.

Every value a template prints is escaped by default: markdown templates (``*.md.j2``) through
``markdown.escape`` (HTML, @mentions, links, images, table pipes), the HTML report through
Jinja's autoescape. Only ``markdown.Trusted`` values (what ``md``, ``code``, ``block`` and the
bot's own rendered fragments return) are printed as they are.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

TEMPLATE_DIR = Path(__file__).parent


@cache
def _environment(html: bool):
    import jinja2

    from stagebot.templates.markdown import Trusted, escape

    def finalize(value: object) -> object:
        if type(value) is jinja2.Undefined:  # `{{ x if c }}` with c false (never a missing name)
            return ""
        if html or isinstance(value, Trusted):
            return value
        return escape(value)

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=html,
        finalize=finalize,
    )


def render_template(name: str, **context) -> str:
    """Render ``templates/<name>`` with ``context``; an unknown variable is an error. Values are
    escaped unless marked ``Trusted`` (markdown) or ``Markup`` (HTML)."""
    return _environment(name.endswith(".html.j2")).get_template(name).render(**context)
