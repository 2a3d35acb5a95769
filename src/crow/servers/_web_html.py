"""HTML to readable text for the web server's ``fetch`` (crow.servers.web), and the
decoding of a body by its declared or ``<meta>`` charset.  Hand-written over the
standard ``html.parser``: the output is shaped for a model to read (headings as ``#``
lines, links as ``text (url)``), which no small library gives as is."""

import codecs
import logging
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

__all__ = ["SPACE", "decode", "html_to_text"]

logger = logging.getLogger("crow.servers.web")

_SKIP_TAGS = frozenset(
    {"script", "style", "nav", "noscript", "svg", "template", "iframe", "canvas", "object"}
)
_PARAGRAPH_TAGS = frozenset(
    {
        "p",
        "blockquote",
        "pre",
        "table",
        "ul",
        "ol",
        "dl",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "figure",
        "form",
        "fieldset",
        "details",
        "address",
        "hr",
    }
)
_LINE_TAGS = frozenset({"div", "br", "tr", "dt", "dd", "li", "figcaption", "summary", "caption"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
SPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")
_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE
)


class _HTMLText(HTMLParser):
    """A small, forgiving HTML-to-text converter (see ``html_to_text``)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._out: list[str] = []
        self._newlines = 0  # line breaks owed before the next text
        self._line_start = True
        self._prefix = ""  # "## " or "- ", written before the next text of the block
        self._skipping: list[str] = []
        self._pre = 0
        self._link: tuple[str, list[str]] | None = None
        self._title: list[str] | None = None
        self.title = ""

    # -- output helpers

    def _break(self, n: int) -> None:
        self._newlines = max(self._newlines, n)
        self._prefix = ""

    def _write(self, text: str) -> None:
        if self._newlines and self._out:
            self._out.append("\n" * self._newlines)
            self._line_start = True
        self._newlines = 0
        if self._line_start:
            text = text.lstrip(" ")
            if not text:
                return
            if self._prefix:
                text = self._prefix + text
                self._prefix = ""
        elif text.startswith(" ") and self._out and self._out[-1].endswith(" "):
            text = text[1:]
        if text:
            self._out.append(text)
            self._line_start = text.endswith("\n")

    def _end_link(self) -> None:
        if self._link is None:
            return
        href, parts = self._link
        self._link = None
        text = SPACE.sub(" ", "".join(parts)).strip()
        url = urljoin(self._base, href) if href and not href.startswith("#") else ""
        if urlsplit(url).scheme.lower() not in ("http", "https", "mailto"):
            url = ""
        if not text:
            return
        if not url or text == url:
            self._write(text)
        else:
            self._write(f"{text} ({url})")

    # -- HTMLParser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping or tag in _SKIP_TAGS:
            if tag in _SKIP_TAGS:
                self._skipping.append(tag)
            return
        if tag == "title":
            self._title = []
        elif tag in _HEADINGS:
            self._end_link()
            self._break(2)
            self._prefix = "#" * _HEADINGS[tag] + " "
        elif tag == "li":
            self._break(1)
            self._prefix = "- "
        elif tag in _PARAGRAPH_TAGS:
            self._break(2)
            if tag == "pre":
                self._pre += 1
        elif tag in _LINE_TAGS:
            self._break(1)
        elif tag in ("td", "th"):
            self._write(" ")
        elif tag == "a":
            self._end_link()
            self._link = (dict(attrs).get("href") or "", [])
        elif tag == "img":
            alt = SPACE.sub(" ", dict(attrs).get("alt") or "").strip()
            if alt:
                self.handle_data(f" [image: {alt}] ")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:  # close it, and whatever was left open inside it
                while self._skipping.pop() != tag:
                    pass
            return
        if tag == "title" and self._title is not None:
            self.title = SPACE.sub(" ", "".join(self._title)).strip()
            self._title = None
        elif tag == "a":
            self._end_link()
        elif tag in _HEADINGS or tag in _PARAGRAPH_TAGS:
            self._end_link()
            self._break(2)
            if tag == "pre" and self._pre:
                self._pre -= 1
        elif tag in _LINE_TAGS:
            self._break(1)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._title is not None:
            self._title.append(data)
        elif self._link is not None:
            self._link[1].append(data)
        elif self._pre:
            if self._newlines and self._out:
                self._out.append("\n" * self._newlines)
            self._newlines = 0
            self._out.append(data)
            self._line_start = data.endswith("\n")
        else:
            self._write(SPACE.sub(" ", data))

    def text(self) -> str:
        self._end_link()
        lines = [line.rstrip() for line in "".join(self._out).split("\n")]
        body = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")
        if self.title and not body.startswith(("# ", f"{self.title}\n")):
            return f"Title: {self.title}\n\n{body}".rstrip()
        return body


def html_to_text(html: str, base_url: str = "") -> str:
    """Readable text from HTML.

    Drops script, style, nav, noscript and svg (and template, iframe, canvas, object); writes
    headings as ``#`` lines, paragraphs and list items (``- item``) on their own lines, and
    links as ``text (absolute url)``. The page title, when present, leads as ``Title: ...``.
    """
    parser = _HTMLText(base_url)
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # pragma: no cover - html.parser is lenient; be safe anyway
        logger.debug("html.parser failed; falling back to tag stripping", exc_info=True)
        stripped = re.sub(r"(?is)<(script|style)\b.*?</\1>|<[^>]+>", " ", html)
        return SPACE.sub(" ", stripped).strip()
    return parser.text()


def decode(body: bytes, charset: str | None, *, html: bool) -> str:
    """Decode with the declared charset, else a ``<meta charset>``, else UTF-8 (lossy)."""
    candidates = [charset] if charset else []
    if html and (found := _META_CHARSET.search(body[:4096])):
        candidates.append(found.group(1).decode("ascii"))
    for name in candidates:
        try:
            codecs.lookup(name)
        except LookupError:
            continue
        return body.decode(name, errors="replace")
    return body.decode("utf-8", errors="replace")
