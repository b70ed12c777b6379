"""External URLs as a browser opens them.

A browser parses a link by the WHATWG URL Standard (`ada-url`, a conforming parser): a backslash is a slash in
http(s), tabs and newlines vanish, a host may be percent-encoded or numeric (`http://2130706433/` is 127.0.0.1),
and an internationalised domain becomes punycode. A person, a log line or a plain RFC 3986 parser reads the same
text differently. ReviewHub refuses at intake every URL on which the two readings disagree about where it leads,
and shows reviewers only the browser's reading (`BrowserUrl`), so the domain they check is the one that opens.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import idna
from ada_url import URL

WEB_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
# Marks and overrides that reorder how text is displayed (Trojan Source, CVE-2021-42574): a URL shown with them
# need not read in the order a browser follows it.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True)
class BrowserUrl:
    """A URL as the WHATWG parser reads it. `href` is the normalised URL, `host` its ASCII host (punycode for
    internationalised domains, an IPv6 address in brackets); `href == prefix + host + suffix`."""

    href: str
    scheme: str
    userinfo: str
    host: str
    prefix: str
    suffix: str
    is_ip_address: bool


@dataclass(frozen=True)
class WrittenUrl:
    """The parts a plain RFC 3986 reader sees (Python's `urlsplit`), normalised as a browser would compare them."""

    scheme: str
    userinfo: str
    host: str
    port: int | None


def read_as_browser(url: str) -> BrowserUrl | None:
    """The browser's reading of `url`, or None when a browser would not open it at all."""
    try:
        parsed = URL(url)
    except ValueError:
        return None
    scheme = parsed.protocol.removesuffix(":")
    userinfo = parsed.username + (f":{parsed.password}" if parsed.password else "")
    prefix = f"{parsed.protocol}//" + (f"{userinfo}@" if userinfo else "")
    suffix = (f":{parsed.port}" if parsed.port else "") + parsed.pathname + parsed.search + parsed.hash
    host = parsed.hostname
    href = parsed.href
    if href != prefix + host + suffix:  # a scheme without a host ("mailto:"): nothing to split
        return BrowserUrl(href, scheme, "", "", href, "", False)
    is_ip = host.startswith("[") or _is_ipv4(host)
    return BrowserUrl(href, scheme, userinfo, host, prefix, suffix, is_ip)


def read_as_written(url: str) -> WrittenUrl | None:
    """The plain reading, or None when a plain reader finds no port or host it can make sense of."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if port is not None and port == DEFAULT_PORTS.get(scheme):
        port = None
    userinfo = ""
    if parts.username is not None or parts.password is not None:
        userinfo = unquote(parts.username or "") + (f":{unquote(parts.password)}" if parts.password else "")
    host = _normalised_host(parts.hostname or "")
    return None if host is None else WrittenUrl(scheme, userinfo, host, port)


def intake_problem(url: str) -> str | None:
    """Why an agent's http(s) URL is refused, or None. Refused: control and bidirectional-override characters,
    anything a browser would not open, and any URL whose browser reading leads elsewhere than its plain one."""
    for character in url:
        category = unicodedata.category(character)
        if category in ("Cc", "Cs"):
            return "must not contain control characters (tabs, newlines and the like)"
        if character in BIDI_CONTROLS:
            return "must not contain bidirectional-override characters"
    browser = read_as_browser(url)
    if browser is None:
        return "is not a URL a browser can open"
    if browser.scheme not in WEB_SCHEMES:
        return "must be an http or https URL"
    written = read_as_written(url)
    if written is None:
        return (
            "has a host or port that only a browser makes sense of; send the URL as a browser would write it"
        )
    if written.host != browser.host or written.scheme != browser.scheme:
        return (
            f"is read differently by browsers: it opens {browser.host}, not {written.host or 'what it appears to'}; "
            "send the URL as a browser would write it"
        )
    browser_port = urlsplit(browser.href).port
    if written.port != browser_port or written.userinfo != unquote(browser.userinfo):
        return "is read differently by browsers (its port or the part before “@”); send it as a browser would"
    return None


def display_host(host: str) -> str:
    """An ASCII (punycode) host as a person reads it, decoded by IDNA 2008 (`idna`); unchanged if not valid."""
    if not any(label.startswith("xn--") for label in host.lower().split(".")):
        return host
    try:
        return str(idna.decode(host))
    except idna.IDNAError:
        return host


def _normalised_host(host: str) -> str | None:
    """A plainly parsed host as a browser compares it: IPv6 compressed in brackets, domains lower-case ASCII."""
    if ":" in host:
        try:
            return f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            return None
    if host.isascii():
        return host.lower()
    try:
        return str(idna.encode(host, uts46=True).decode("ascii"))
    except idna.IDNAError:
        return None


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True
