"""daemon/api/hosts.py: which ``Host`` a loopback port answers, for every generated value.

The port's own names (its bound address, localhost, 127.0.0.1, [::1]) with no port or its own are
answered; any other name, another port, two Host headers or none are refused.  The real ports of a
daemon are driven in tests/failure_modes/test_loopback_ports_answer_only_their_own_names.py.
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from daemon.api.hosts import LOOPBACK_NAMES, HostCheck, allowed, host_names

PORT = 8765
BOUND = st.sampled_from(["127.0.0.1", "::1"])


def test_the_ports_own_names_are_answered_with_or_without_its_port():
    for bound in ("127.0.0.1", "::1"):
        for name in (*host_names(bound), "LOCALHOST", "LocalHost"):
            assert allowed(name, bound, PORT), name
            assert allowed(f"{name}:{PORT}", bound, PORT), name
    assert host_names("::1")[0] == "[::1]" and host_names("127.0.0.2")[0] == "127.0.0.2"
    assert allowed("127.0.0.2:8765", "127.0.0.2", PORT)


def test_other_hosts_ports_and_forms_are_refused():
    for host in (
        "evil.example",
        f"evil.example:{PORT}",
        f"localhost:{PORT + 1}",
        "localhost:",
        "localhost:²",  # a Unicode digit: not this port
        f"127.0.0.1:0{PORT}",
        f"127.0.0.1:{PORT}x",
        "::1",  # IPv6 without brackets is no Host form
        f"[::1]x:{PORT}",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "0.0.0.0",
        "",
        None,
    ):
        assert not allowed(host, "127.0.0.1", PORT), host


def _expected(host: str, bound: str, port: int) -> bool:
    """The rule, written out: one of the port's names, alone or with ``:port``, any case."""
    given = host.strip().lower()
    return any(given in (name, f"{name}:{port}") for name in host_names(bound))


HOSTS = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda name, sep, port, case: (name.upper() if case else name) + sep + port,
        st.sampled_from([*LOOPBACK_NAMES, "::1", "127.0.0.2", "evil.example", "localhost.", "[::1"]),
        st.sampled_from(["", ":", "::"]),
        st.one_of(st.just("8765"), st.integers(0, 99999).map(str), st.text("0123456789²٣８", max_size=6)),
        st.booleans(),
    ),
)


@given(bound=BOUND, host=HOSTS)
def test_a_generated_host_is_answered_exactly_when_it_names_the_port(bound, host):
    assert allowed(host, bound, PORT) == _expected(host, bound, PORT), host


@given(bound=BOUND, name=st.sampled_from(LOOPBACK_NAMES), port=st.integers(1, 65535), other=st.integers(0, 99999))
def test_a_port_named_in_host_must_be_this_one(bound, name, port, other):
    assert allowed(f"{name}:{other}", bound, port) == (other == port)


def _answer(headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """One request through HostCheck in front of an app that answers 200: the status and body."""

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "headers": headers, "server": ("127.0.0.1", PORT)}
    asyncio.run(HostCheck(app)(scope, None, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_middleware_answers_421_naming_what_the_port_answers():
    assert _answer([(b"host", f"localhost:{PORT}".encode())]) == (200, b"ok")
    status, body = _answer([(b"host", b"evil.example")])
    assert status == 421 and b"127.0.0.1:8765, localhost:8765, [::1]:8765" in body and b"evil.example" in body
    assert _answer([])[0] == 421, "no Host"
    assert _answer([(b"host", b"localhost"), (b"host", b"evil.example")])[0] == 421, "two Hosts"
    status, body = _answer([(b"host", b"x" * 5000)])
    assert status == 421 and b"5,000 characters" in body and len(body) < 1000, "a long Host is cut"
