"""Self-contained HTML pages (jinja2 templates in `templates/`): the report of one cube and the
index of many.

A report page is its markdown (tables, text) rendered by markdown-it-py, with every figure the
markdown shows embedded as a base64 PNG `data:` URI and the CSS inline: the file alone is the
report, readable offline, and it asks the network for nothing. Raw HTML in the markdown is not
passed through (markdown-it's commonmark preset with html off) and template values are
autoescaped, so a spec's text cannot inject markup.
"""

from __future__ import annotations

import base64
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

__all__ = ["render_markdown", "render_page", "data_uri"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]),
                   trim_blocks=True, lstrip_blocks=True)


def inline_markdown(text: str) -> Markup:
    """One line of markdown (code spans, emphasis) as inline HTML; raw HTML stays escaped."""
    return Markup(MarkdownIt("commonmark", {"html": False}).renderInline(str(text)))


_env.filters["inline_markdown"] = inline_markdown


def data_uri(path: Path) -> str:
    """A PNG file as a `data:image/png;base64,...` URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def render_markdown(text: str, folder: Path) -> Markup:
    """Markdown to HTML, each image whose source is a file in `folder` embedded as a data URI.

    An image that is not a file there keeps its source: the browser test reports it as a
    figure that does not load."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    default_image = md.renderer.rules["image"]

    def embedded_image(renderer, tokens, idx, options, env):
        src = tokens[idx].attrGet("src") or ""
        local = Path(folder) / src
        if src and "/" not in src and local.is_file():
            tokens[idx].attrSet("src", data_uri(local))
        return default_image(tokens, idx, options, env)

    md.add_render_rule("image", embedded_image)
    return Markup(md.render(text))


def render_page(template: str, **context) -> str:
    """The page `template` (a file of `templates/`) rendered with `context`."""
    return _env.get_template(template).render(**context)
