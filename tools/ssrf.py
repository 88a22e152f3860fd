"""SSRF guard for fetch_url: resolve, check that every address is public, connect only to what was checked.

Facts this module is built on (see shared/reference.md):

* ``ipaddress`` does not call ``::ffff:127.0.0.1`` loopback, and counts NAT64 / 6to4 forms of
  ``169.254.169.254`` as global, so embedded IPv4 addresses are unwrapped and judged themselves.
* ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` all reach 127.0.0.1 through the C resolver, so host
  names are parsed the way ``inet_aton`` parses them before anything else.
* aiohttp skips a custom resolver for IP-literal URLs, so literals are checked here; for names, the
  session's resolver (``PinnedResolver``) only ever answers with the addresses this module checked, so
  a DNS answer that changes between check and connect (DNS rebinding) cannot redirect the connection.

Redirects are not followed by aiohttp; fetch_url calls ``URLGuard.check`` again for every hop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tools.errors import BlockedURLError, FetchError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: Turns (host, port) into the addresses a connection would use.
HostResolver = Callable[[str, int], Awaitable[list[IPAddress]]]

ALLOWED_SCHEMES = frozenset({"http", "https"})
METADATA_ADDRESS = ipaddress.IPv4Address("169.254.169.254")
CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
#: RFC 8215 local-use NAT64: the embedded IPv4 address sits elsewhere, and it is never public.
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
#: After IDNA encoding, a DNS name is letters, digits, hyphens and dots; anything else is refused.
_HOSTNAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,62}\.)*[a-z0-9_-]{0,63}$")
_INET_ATON_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells, in any form the C resolver accepts (``0x7f.1``, ``2130706433``…)."""
    host = host.strip().removeprefix("[").removesuffix("]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    parts = host.removesuffix(".").split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.match(p) for p in parts):
        return None
    values = [_aton_int(p) for p in parts]
    # inet_aton: a.b.c.d, a.b.c (c fills 16 bits), a.b (b fills 24 bits), a (32 bits).
    *leading, last = values
    if any(v > 0xFF for v in leading) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = 0
    for v in leading:
        number = number << 8 | v
    number = number << (8 * (5 - len(values))) | last
    return ipaddress.IPv4Address(number)


def _aton_int(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address, else ``ip``."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if int(ip) >> 32 == 0 and int(ip) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(ip))
    return ip


def refusal_reason(ip: IPAddress) -> str | None:
    """Why fetch_url must not connect to ``ip`` (e.g. "loopback"), or None when it is public."""
    if ip in NAT64_LOCAL:
        return "local-use NAT64"
    target = unwrap(ip)
    if target == METADATA_ADDRESS:
        return "cloud metadata"
    if isinstance(target, ipaddress.IPv4Address) and target in CGNAT:
        return "carrier-grade NAT"
    checks = (
        ("unspecified", target.is_unspecified),
        ("loopback", target.is_loopback),
        ("link-local", target.is_link_local),
        ("private", target.is_private),
        ("multicast", target.is_multicast),
        ("reserved", target.is_reserved),
        ("site-local", isinstance(target, ipaddress.IPv6Address) and target.is_site_local),
    )
    for label, hit in checks:
        if hit:
            return label
    if not target.is_global:
        return "non-global"
    return None


@dataclass(frozen=True, slots=True)
class AllowList:
    """Operator exceptions (FETCH_URL_ALLOWED_HOSTS): names or addresses with an optional port, or CIDRs.

    >>> AllowList.parse(["docs.internal", "127.0.0.1:8080", "10.1.0.0/16"]).allows_name("docs.internal", 443)
    True
    """

    names: frozenset[tuple[str, int | None]] = frozenset()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Parse settings entries; a malformed one is a ValueError naming it."""
        names: set[tuple[str, int | None]] = set()
        networks: list[tuple[IPNetwork, int | None]] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            if "/" in entry:
                try:
                    networks.append((ipaddress.ip_network(entry, strict=False), None))
                except ValueError as exc:
                    raise ValueError(f"FETCH_URL_ALLOWED_HOSTS entry {raw!r} is not a valid CIDR") from exc
                continue
            host, port = _split_host_port(raw, entry)
            literal = parse_ip_literal(host)
            if literal is not None:
                networks.append((ipaddress.ip_network(literal), port))
            else:
                names.add((host.rstrip("."), port))
        return cls(frozenset(names), tuple(networks))

    def allows_name(self, host: str, port: int) -> bool:
        """True when the host name itself is listed (for this port or any)."""
        host = host.lower().rstrip(".")
        return (host, port) in self.names or (host, None) in self.names

    def allows_address(self, ip: IPAddress, port: int) -> bool:
        """True when ``ip`` (or the IPv4 address it wraps) falls in a listed address or network."""
        candidates = {ip, unwrap(ip)}
        return any(
            (allowed_port is None or allowed_port == port)
            and any(c.version == net.version and c in net for c in candidates)
            for net, allowed_port in self.networks
        )


def _split_host_port(raw: str, entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port
        host, _, rest = entry[1:].partition("]")
        port_text = rest.removeprefix(":") or None
    elif entry.count(":") == 1:
        host, port_text = entry.split(":")
    else:  # a name, an IPv4 address, or a bare IPv6 address
        host, port_text = entry, None
    if port_text is None:
        return host, None
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"FETCH_URL_ALLOWED_HOSTS entry {raw!r} has a bad port {port_text!r}")
    return host, int(port_text)


@dataclass(frozen=True, slots=True)
class CheckedTarget:
    """A URL that passed the guard, and the addresses a connection to it may use."""

    url: URL
    host: str
    port: int
    addresses: tuple[str, ...]
    #: Reached through FETCH_URL_ALLOWED_HOSTS (listed by name, or an internal address listed): an internal
    #: host, whose pages are the company's private data.
    internal: bool = False


async def system_resolve(host: str, port: int) -> list[IPAddress]:
    """Resolve with the system resolver (getaddrinfo), as a connection would."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"could not resolve host {host!r} ({exc})") from exc
    seen: dict[IPAddress, None] = {}
    for *_, sockaddr in infos:
        # Drop an IPv6 zone ("fe80::1%eth0"); the address is refused as link-local anyway.
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0]).split("%")[0]), None)
    return list(seen)


class URLGuard:
    """Decides whether a URL may be fetched and which addresses a connection may use."""

    def __init__(self, allow: AllowList | None = None, resolve: HostResolver = system_resolve) -> None:
        self._allow = allow or AllowList()
        self._resolve = resolve

    async def check(self, url: URL) -> CheckedTarget:
        """The checked target, or ``BlockedURLError`` saying what is wrong and what to change."""
        if url.scheme not in ALLOWED_SCHEMES:
            raise BlockedURLError(
                f"only http and https URLs can be fetched, not {url.scheme or 'no'!r} scheme"
            )
        if url.user or url.password:
            raise BlockedURLError("URLs with a user name or password are not fetched")
        host = (url.host or "").lower().rstrip(".")
        port = url.port
        if not host or port is None:
            raise BlockedURLError(f"{str(url)!r} has no host name")
        literal = parse_ip_literal(host)
        if literal is None and not _HOSTNAME.match(host):
            raise BlockedURLError(f"{host!r} is not a valid host name")
        addresses = [literal] if literal is not None else await self._resolve(host, port)
        if not addresses:
            raise FetchError(f"host {host!r} has no address")
        internal = self._allow.allows_name(host, port)
        if not internal:
            for ip in addresses:
                reason = refusal_reason(ip)
                internal = internal or reason is not None or self._allow.allows_address(ip, port)
                if reason is not None and not self._allow.allows_address(ip, port):
                    shown = host if literal is None else str(url.host)
                    raise BlockedURLError(
                        f"refused {str(url)!r}: {shown} is {ip}, a {reason} address, which fetch_url "
                        "does not reach (operators can allow it in FETCH_URL_ALLOWED_HOSTS)"
                    )
        return CheckedTarget(url, host, port, tuple(str(ip) for ip in addresses), internal)


class PinnedResolver(AbstractResolver):
    """An aiohttp resolver that answers only with addresses the guard checked (``pin``), never with DNS."""

    def __init__(self) -> None:
        self._pins: dict[str, tuple[str, ...]] = {}

    def pin(self, target: CheckedTarget) -> None:
        """Let connections to ``target.host`` use exactly ``target.addresses``."""
        self._pins[target.host] = target.addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The pinned addresses for ``host``; an unchecked host is a connection error."""
        addresses = self._pins.get(host.lower().rstrip("."))
        if not addresses:
            raise OSError(f"{host!r} was not checked by the SSRF guard")
        return [_result(host, address, port) for address in addresses]

    async def close(self) -> None:
        """Nothing to release."""


def _result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(
        hostname=host,
        host=address,
        port=port,
        family=family,
        proto=socket.IPPROTO_TCP,
        flags=socket.AI_NUMERICHOST,
    )
