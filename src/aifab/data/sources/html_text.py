"""HTML to plain text with the standard library: title, readable text with block breaks, links."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

#: Elements whose content is never text a reader sees (``head`` is not listed: its end tag is
#: optional, and its only text, the title, is captured separately).
_SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
#: Blocks: a paragraph break (one blank line) before and after.
_BLOCK = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "div",
        "dl",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "ul",
    }
)
#: Items: start a new line (no blank line, so lists and table rows stay together).
_LINE = frozenset({"br", "dd", "dt", "li", "tr"})
#: Table cells: separated by a space.
_CELL = frozenset({"td", "th"})
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class HtmlText:
    """What a page says: its title, its text and the ``href`` of its links (as written)."""

    title: str | None
    text: str
    links: tuple[str, ...]


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self.links: list[str] = []
        self.skip_depth = 0
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _SKIP:
            self.skip_depth += 1
        if tag in _BLOCK:
            self.parts.append("\n\n")
        elif tag in _LINE:
            self.parts.append("\n")
        elif tag in _CELL:
            self.parts.append(" ")
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in _SKIP and self.skip_depth:
            self.skip_depth -= 1
        if tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
        elif not self.skip_depth:
            self.parts.append(data)


def _tidy(text: str) -> str:
    """Collapse runs of spaces, strip each line, keep at most one blank line between blocks."""
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def extract(html: str) -> HtmlText:
    """Parse ``html`` (malformed markup is tolerated) into title, text and links."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    title = " ".join("".join(parser.title_parts).split())
    return HtmlText(title or None, _tidy("".join(parser.parts)), tuple(parser.links))
