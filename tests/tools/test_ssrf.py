"""SSRF guard: literal spellings, embedded IPv4, address classes, allow-list, schemes — no network."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError
from yarl import URL

from tests.tools.conftest import make_settings
from tools.errors import BlockedURLError, FetchError
from tools.ssrf import (
    AllowList,
    IPAddress,
    PinnedResolver,
    URLGuard,
    parse_ip_literal,
    refusal_reason,
    unwrap,
)


async def no_dns(host: str, port: int) -> list[IPAddress]:
    raise AssertionError(f"DNS must not be asked for {host!r}")


def fake_dns(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address(a) for a in answers[host]]

    return resolve


@pytest.mark.parametrize(
    ("spelling", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0177.0.0.01", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("127.0.0.1.", "127.0.0.1"),
        ("[::1]", "::1"),
        ("8.8.8.8", "8.8.8.8"),
    ],
)
def test_inet_aton_spellings_are_parsed(spelling: str, address: str) -> None:
    assert parse_ip_literal(spelling) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host", ["example.com", "127.0.0.1.example.com", "0x7g.1", "1.2.3.4.5", "256.1.1.1", "09"]
)
def test_names_are_not_literals(host: str) -> None:
    assert parse_ip_literal(host) is None


@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::127.0.0.1", "127.0.0.1"),
        ("64:ff9b::169.254.169.254", "169.254.169.254"),
        ("2002:a9fe:a9fe::1", "169.254.169.254"),
        ("2606:4700:4700::1111", "2606:4700:4700::1111"),
    ],
)
def test_embedded_ipv4_is_unwrapped(address: str, embedded: str) -> None:
    assert unwrap(ipaddress.ip_address(address)) == ipaddress.ip_address(embedded)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("fd00:ec2::254", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:a9fe:a9fe::", "cloud metadata"),
        ("64:ff9b:1::a", "local-use NAT64"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("192.0.2.10", "private"),
        ("255.255.255.255", "private"),
        ("fec0::1", "site-local"),
    ],
)
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1:8080/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::]/",
        "http://0xa9fea9fe/",
        "http://100.100.100.200/",
        "http://0/",
        "https://10.0.0.1/",
    ],
)
async def test_literal_urls_are_refused_without_dns(url: str) -> None:
    with pytest.raises(BlockedURLError, match="which fetch_url does not reach"):
        await URLGuard(resolve=no_dns).check(URL(url))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("ftp://example.com/", "only http and https"),
        ("gopher://example.com/", "only http and https"),
        ("http://user:pw@example.com/", "user name or password"),
        ("http://example.com@127.0.0.1/", "user name or password"),
        ("http://exa mple.com/", "not a valid host name"),
    ],
)
async def test_schemes_credentials_and_bad_hosts_are_refused(url: str, message: str) -> None:
    with pytest.raises(BlockedURLError, match=message):
        await URLGuard(resolve=no_dns).check(URL(url))


async def test_names_resolving_to_private_addresses_are_refused() -> None:
    guard = URLGuard(resolve=fake_dns({"evil.test": ["10.0.0.5"], "mixed.test": ["8.8.8.8", "127.0.0.1"]}))
    with pytest.raises(BlockedURLError, match="evil.test is 10.0.0.5, a private address"):
        await guard.check(URL("http://evil.test/"))
    # One bad answer among good ones is enough: the connection could use any of them.
    with pytest.raises(BlockedURLError, match="loopback"):
        await guard.check(URL("https://mixed.test/"))


async def test_public_names_pass_with_their_addresses() -> None:
    guard = URLGuard(
        resolve=fake_dns({"example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]})
    )
    target = await guard.check(URL("https://Example.COM./path"))
    assert (target.host, target.port) == ("example.com", 443)
    assert target.addresses == ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")


async def test_unresolvable_names_are_a_fetch_error() -> None:
    async def failing(host: str, port: int) -> list[IPAddress]:
        raise FetchError(f"could not resolve host {host!r}")

    with pytest.raises(FetchError, match="could not resolve"):
        await URLGuard(resolve=failing).check(URL("http://nowhere.test/"))


async def test_allow_list_by_host_and_port_by_cidr_and_by_name() -> None:
    allow = AllowList.parse(["127.0.0.1:8080", "10.20.0.0/16", "docs.internal", "[::1]:9000"])
    guard = URLGuard(
        allow, resolve=fake_dns({"docs.internal": ["192.168.5.5"], "other.internal": ["10.20.3.4"]})
    )
    assert (await guard.check(URL("http://127.0.0.1:8080/"))).addresses == ("127.0.0.1",)
    assert (await guard.check(URL("http://0x7f.1:8080/"))).addresses == ("127.0.0.1",)  # same address
    assert (await guard.check(URL("http://[::1]:9000/"))).addresses == ("::1",)
    assert (await guard.check(URL("http://10.20.9.9/"))).addresses == ("10.20.9.9",)
    assert (await guard.check(URL("http://docs.internal/"))).addresses == ("192.168.5.5",)
    assert (await guard.check(URL("http://other.internal:81/"))).addresses == ("10.20.3.4",)
    for refused in ("http://127.0.0.1:8081/", "http://127.0.0.1/", "http://[::1]:9001/", "http://10.21.0.1/"):
        with pytest.raises(BlockedURLError):
            await guard.check(URL(refused))


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "localhost:http", "127.0.0.1:0", "host:99999"])
def test_bad_allow_list_entries_fail_at_start_up_naming_the_setting(entry: str) -> None:
    with pytest.raises(ValueError, match="FETCH_URL_ALLOWED_HOSTS"):
        AllowList.parse([entry])
    with pytest.raises(ValidationError, match="FETCH_URL_ALLOWED_HOSTS"):
        make_settings(fetch_url_allowed_hosts=entry)


async def test_pinned_resolver_answers_only_checked_hosts() -> None:
    resolver = PinnedResolver()
    guard = URLGuard(resolve=fake_dns({"example.com": ["93.184.215.14"]}))
    resolver.pin(await guard.check(URL("http://example.com/")))
    (answer,) = await resolver.resolve("example.com", 80)
    assert (answer["host"], answer["port"], answer["hostname"]) == ("93.184.215.14", 80, "example.com")
    with pytest.raises(OSError, match="not checked"):
        await resolver.resolve("elsewhere.com", 80)
