"""Page assembly: one self-contained HTML file, a partial plotly.js bundle inlined once, compressed.

Everything that comes from data (captions, ids, paths, encoder names) goes
through :func:`html.escape`; caption highlights are applied to the raw text by
character offset and each piece is escaped on its own, so a span lands on the
same characters after escaping as before. Figures are embedded with
``plotly.io.to_html(..., include_plotlyjs=False)``, which escapes ``</`` inside
its JSON, and the page loads nothing from the network: no CDN, fonts or images.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
from dataclasses import dataclass, field
from importlib import resources
from typing import Iterable, Mapping, Sequence

#: Captions with more words than this are shown clamped to a few lines, with a button to expand.
LONG_CAPTION_WORDS = 60
#: characters of one caption shown in a report (over 10x the longest DOCCI caption);
#: the rest is summarised by its length
MAX_SHOWN_CHARS = 50_000

#: Tooltip per span kind.
SPAN_TITLES = {"shared": "shared word", "only_a": "only in this caption", "only_b": "only in this caption"}

#: CSS class per span kind (from capgeo.findings.highlight: shared / only_a / only_b).
SPAN_CLASSES = {"shared": "shared", "only_a": "only", "only_b": "only", "only": "only", "differs": "only"}

CSS = """
:root { --ink:#1f2430; --muted:#5b6272; --line:#e3e6ee; --bg:#f7f8fb; --card:#fff;
        --warn:#a63603; --warn-bg:#fff1e6; --note:#1f5fa8; --note-bg:#eaf2fc; }
* { box-sizing: border-box; }
body { margin:0; font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
       color:var(--ink); background:var(--bg); line-height:1.5; }
header { background:#1f2430; color:#fff; padding:20px 32px; }
header h1 { margin:0 0 4px; font-size:1.5rem; }
header p { margin:0; color:#c9cfdc; overflow-wrap:anywhere; }
nav { margin-top:10px; display:flex; flex-wrap:wrap; gap:6px 14px; font-size:0.9rem; }
nav a { color:#9ecbff; text-decoration:none; }
main { max-width:1200px; margin:0 auto; padding:16px 24px 48px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:16px 20px; margin:16px 0; }
section h2 { margin:0 0 10px; font-size:1.2rem; }
.lead { color:var(--muted); margin:0 0 10px; max-width:80ch; }
.summary-columns { display:grid; grid-template-columns: 1fr 1fr; gap:0 24px; }
@media (max-width: 900px) { .summary-columns { grid-template-columns: 1fr; } }
.summary-columns th { width:48%; }
table { border-collapse:collapse; width:100%; font-size:0.95rem; }
th, td { text-align:left; padding:6px 10px; border-bottom:1px solid var(--line); vertical-align:top;
         overflow-wrap:anywhere; }
th { color:var(--muted); font-weight:600; width:34%; }
table.compare th { width:auto; }
/* narrow screens: the side-by-side table and the figures scroll sideways instead of breaking words or squashing axes */
.scroll { overflow-x:auto; }
table.compare th, table.compare td { overflow-wrap:normal; min-width:9ch; }
table.compare td.num, table.summary td.num { font-variant-numeric: tabular-nums; }
dl.headline { display:grid; grid-template-columns:repeat(auto-fit, minmax(160px, 1fr)); gap:10px; margin:0; }
dl.headline .tile { border:1px solid var(--line); border-radius:6px; padding:8px 12px; background:#fcfcfe; }
dl.headline dt { color:var(--muted); font-size:0.8rem; font-weight:600; }
dl.headline dd { margin:2px 0 0; font-variant-numeric:tabular-nums; overflow-wrap:anywhere; }
ul.alerts { list-style:none; padding:0; margin:0; }
ul.alerts li { padding:10px 14px; border-radius:6px; margin:6px 0; }
ul.alerts li.warning { background:var(--warn-bg); border-left:4px solid var(--warn); }
ul.alerts li.notice { background:var(--note-bg); border-left:4px solid var(--note); }
ul.alerts li strong { display:block; }
p.ok { color:#2b7a3d; }
.figure { width:100%; min-height:420px; overflow-x:auto; }
.figure > div { min-width:640px; }
.notes li { color:var(--muted); }
.map-search { margin:8px 0; } .map-search input { font:inherit; padding:2px 6px; }
p.takeaway { margin:6px 0 0; font-size:0.9rem; border-left:3px solid var(--note); padding-left:10px; }
.example { border-top:1px solid var(--line); padding:12px 0; }
.example:first-of-type { border-top:none; }
.example-grid { display:grid; grid-template-columns: 1fr 1fr; gap:14px; margin:8px 0; align-items:start; }
.example-grid > .caption-box { position:sticky; top:8px; }
.neighbours { display:flex; flex-direction:column; gap:10px; }
@media (max-width: 800px) { .example-grid { grid-template-columns: 1fr; } }
.pair { display:grid; grid-template-columns: 1fr 1fr; gap:14px; margin:8px 0; }
@media (max-width: 800px) { .pair { grid-template-columns: 1fr; } }
.caption-box { border:1px solid var(--line); border-radius:6px; padding:8px 10px; background:#fcfcfe; min-width:0; }
.caption-box .meta { font-size:0.8rem; color:var(--muted); margin-bottom:4px; overflow-wrap:anywhere; }
.caption { max-width:75ch; white-space:pre-wrap; overflow-wrap:anywhere; margin:0; }
.caption.clamped { max-height:9.5em; overflow:hidden;
                   -webkit-mask-image: linear-gradient(180deg, #000 70%, transparent); }
button.expand { margin-top:4px; font-size:0.8rem; border:1px solid var(--line); background:#fff;
                border-radius:4px; padding:2px 8px; cursor:pointer; color:var(--note); }
.unseen { color:#9aa1ad; }
mark.shared { background:#ffe08a; color:inherit; padding:0 1px; border-radius:2px; }
mark.only { background:none; color:inherit; border-bottom:2px dotted #6b9bd1; }
.legend mark { margin-right:6px; }
.stats { font-size:0.85rem; color:var(--muted); }
.badge { display:inline-block; font-size:0.75rem; padding:0 6px; border-radius:10px; background:#fde2e1; color:#9b1c1c; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size:0.85rem; }
pre.command { white-space:pre-wrap; overflow-wrap:anywhere; background:#f1f3f7; padding:8px 10px; border-radius:6px; }
footer { text-align:center; color:var(--muted); font-size:0.8rem; padding:16px; }
"""

# expands clamped captions; nothing else on the page needs script besides plotly
PAGE_SCRIPT = """
document.querySelectorAll('button.expand').forEach(function (button) {
  button.addEventListener('click', function () {
    var caption = document.getElementById(button.getAttribute('data-target'));
    var clamped = caption.classList.toggle('clamped');
    button.textContent = clamped ? button.getAttribute('data-more') : 'Show less';
    button.setAttribute('aria-expanded', clamped ? 'false' : 'true');
  });
});
"""


def escape(value) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class Section:
    """One ``<section>`` of the page; ``body`` is already-escaped HTML."""

    id: str
    title: str
    body: str
    lead: str | None = None  # plain text, escaped on render

    def render(self) -> str:
        lead = f'<p class="lead">{escape(self.lead)}</p>' if self.lead else ""
        return f'<section id="{escape(self.id)}"><h2>{escape(self.title)}</h2>{lead}{self.body}</section>'


@dataclass
class Page:
    title: str
    subtitle: str
    sections: list[Section] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)  # the page's own scripts, after PAGE_SCRIPT

    def render(self, plotly_js: str) -> str:
        from capgeo._atomic import html_page_start  # with the mark that lets a later run replace this page

        nav = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in self.sections)
        body = "\n".join(section.render() for section in self.sections)
        return _utf8_writable(
            f"{html_page_start()}"
            f"<title>{escape(self.title)}</title>\n<style>{CSS}</style>\n"
            f'<script id="plotly-js">{plotly_js}</script>\n'
            "</head>\n<body>\n"
            f"<header><h1>{escape(self.title)}</h1><p>{escape(self.subtitle)}</p><nav>{nav}</nav></header>\n"
            f"<main>\n{body}\n</main>\n"
            f"<footer>Made with capgeo. This file is self-contained: it loads nothing from the network.</footer>\n"
            + "".join(f"<script>{script}</script>\n" for script in (PAGE_SCRIPT, *self.scripts))
            + "</body>\n</html>\n"
        )


def _utf8_writable(page: str) -> str:
    """The page with each lone surrogate (a byte of a file name that is not UTF-8, as os.fsdecode
    holds it) written as its escape, ``\\udcff``: the page is UTF-8, which cannot hold one, and
    the escape still tells which byte it was (inside a script it is the same character again)."""
    return page.encode("utf-8", "backslashreplace").decode("utf-8")


def notes_section(notes: Sequence[str]) -> Section:
    """The "Left out or changed" section of a page: what was adapted or left out, and why."""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return Section("notes", "Left out or changed", f'<ul class="notes">{items}</ul>')


#: capgeo's partial plotly.js bundle (the trace types its pages draw; vendor/README.md says how it is built),
#: gzip-compressed beside its licence. A page carries it as base64 and unpacks it with the browser's
#: DecompressionStream (Chromium 80, Firefox 113, Safari 16.4): 0.73 MB instead of plotly's full 4.8 MB.
PLOTLY_BUNDLE = "vendor/plotly-capgeo.min.js.gz"
#: script type of a figure's drawing code: the browser leaves it alone until the bundle is unpacked
FIGURE_SCRIPT_TYPE = "text/x-capgeo-figure"

# unpacks plotly (one global, Plotly), then draws every figure in page order; a browser without
# DecompressionStream gets a line in each figure's place instead of a blank
PLOTLY_LOADER = """
(function () {
  var packed = "%(payload)s";
  function figures() { return document.querySelectorAll('script[type="%(type)s"]'); }
  function draw() {
    figures().forEach(function (script) { (0, eval)(script.textContent); });
  }
  function explain(error) {
    if (window.console) console.error('capgeo: the charts were not drawn: ' + error);
    document.querySelectorAll('.figure').forEach(function (figure) {
      var note = document.createElement('p');
      note.className = 'no-figure';
      note.textContent = 'This browser cannot unpack the charts (' + error + '); open the page in Chromium 80+, '
        + 'Firefox 113+ or Safari 16.4+.';
      figure.appendChild(note);
    });
  }
  function whenParsed(then) {
    if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', then); else then();
  }
  if (typeof DecompressionStream === 'undefined') { whenParsed(function () { explain('no DecompressionStream'); }); return; }
  var bytes = Uint8Array.from(atob(packed), function (c) { return c.charCodeAt(0); });
  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text().then(function (source) {
    // a script element, not eval: the bundle opens with "use strict", which would keep its global in the eval
    var bundle = document.createElement('script');
    bundle.textContent = source;
    document.head.appendChild(bundle);
    whenParsed(draw);
  }).catch(function (error) { whenParsed(function () { explain(error); }); });
})();
"""


@functools.lru_cache(maxsize=1)
def _plotly_bundle() -> bytes:
    return resources.files("capgeo.report").joinpath(PLOTLY_BUNDLE).read_bytes()


def plotly_source() -> str:
    """The partial plotly.js bundle's JavaScript, unpacked (what the browser runs)."""
    return gzip.decompress(_plotly_bundle()).decode("utf-8")


def plotly_javascript() -> str:
    """The page's one plotly ``<script>``: the compressed bundle as base64 and the code that unpacks it
    and draws the figures (base64 holds no ``<``, so nothing in it can end the element early)."""
    payload = base64.b64encode(_plotly_bundle()).decode("ascii")
    return PLOTLY_LOADER % {"payload": payload, "type": FIGURE_SCRIPT_TYPE}


def figure_div(figure, div_id: str, post_script: str | None = None) -> str:
    """A figure's ``<div>`` plus the script that draws it once plotly is unpacked; plotly.js itself is
    not included. ``post_script``: JavaScript run once the figure is drawn (``{plot_id}``: its div's id)."""
    import plotly.io as pio

    config = {"displaylogo": False, "responsive": True,
              "toImageButtonOptions": {"format": "png", "filename": div_id}}
    markup = pio.to_html(figure, full_html=False, include_plotlyjs=False, div_id=div_id, config=config,
                         default_height="420px" if figure.layout.height is None else f"{figure.layout.height}px",
                         post_script=post_script)
    markup = markup.replace("<script>", f'<script type="{FIGURE_SCRIPT_TYPE}">')
    markup = markup.replace('<script type="text/javascript">', f'<script type="{FIGURE_SCRIPT_TYPE}">')
    return f'<div class="figure" data-figure="{escape(div_id)}">{markup}</div>'


def table(rows: Iterable[tuple[str, str]], css_class: str = "summary") -> str:
    """Two-column table; labels are escaped here, values must already be HTML."""
    body = "".join(f"<tr><th>{escape(label)}</th><td class=\"num\">{value}</td></tr>" for label, value in rows)
    return f'<table class="{css_class}"><tbody>{body}</tbody></table>'


def highlight(text: str, spans: Sequence) -> str:
    """Escaped ``text`` with each span wrapped in ``<mark class=...>``.

    ``spans`` are mappings (dicts, or a typed profile's read-only ones) or objects with ``start``,
    ``end`` (Python string offsets into ``text``, end exclusive) and ``kind``. Spans that overlap an earlier one or fall
    outside the text are skipped rather than allowed to corrupt the markup.
    """
    pieces: list[str] = []
    cursor = 0
    normalised = []
    for span in spans or ():
        get = span.get if isinstance(span, Mapping) else (lambda key, s=span: getattr(s, key, None))
        start, end, kind = get("start"), get("end"), get("kind")
        if start is None or end is None:
            continue
        normalised.append((int(start), int(end), str(kind or "shared"), get("title") or SPAN_TITLES.get(kind, kind)))
    for start, end, kind, title in sorted(normalised):
        if start < cursor or end <= start or end > len(text):
            continue
        css = SPAN_CLASSES.get(kind, "shared")
        pieces.append(escape(text[cursor:start]))
        pieces.append(f'<mark class="{css}" title="{escape(title)}">{escape(text[start:end])}</mark>')
        cursor = end
    pieces.append(escape(text[cursor:]))
    return "".join(pieces)


class CaptionIds:
    """Unique element ids for captions on one page (for the expand buttons)."""

    def __init__(self, prefix: str = "cap"):
        self.prefix = prefix
        self.count = 0

    def next(self) -> str:
        self.count += 1
        return f"{self.prefix}-{self.count}"


def caption_html(text: str, spans: Sequence, ids: CaptionIds) -> str:
    """A caption with highlights; long captions are clamped to a few lines with a button to expand."""
    words = len(text.split())
    body = highlight(text[:MAX_SHOWN_CHARS], spans)
    if len(text) > MAX_SHOWN_CHARS:
        # a runaway caption (megabytes) would otherwise be copied, marked up, into every gallery entry
        body += escape(f" … ({len(text) - MAX_SHOWN_CHARS:,} more characters not shown)")
    if words <= LONG_CAPTION_WORDS:
        return f'<p class="caption" dir="auto">{body}</p>'
    element_id = ids.next()
    more = f"Show all {words} words" if len(text) <= MAX_SHOWN_CHARS else f"Show the first {MAX_SHOWN_CHARS:,} characters"
    return (f'<p class="caption clamped" dir="auto" id="{element_id}">{body}</p>'
            f'<button type="button" class="expand" data-target="{element_id}" data-more="{escape(more)}" '
            f'aria-expanded="false">{escape(more)}</button>')
