"""Connection admission as pure bookkeeping (guards.Admission, guards.network_of): which network a
client is counted in, the caps, the room kept for token holders and who is evicted to make room.
No sockets: each test feeds arrivals and state changes and reads the decisions."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from orchestrator.teamserver.guards import Admission, network_of

_ids = itertools.count()


def conn() -> int:
    return next(_ids)


@pytest.mark.parametrize(("address", "network"), [
    ("127.0.0.1", "127.0.0.0/24"),
    ("127.0.0.254", "127.0.0.0/24"),
    ("127.0.1.1", "127.0.1.0/24"),  # 127/8 is many /24s: the third octet differs
    ("10.20.30.40", "10.20.30.0/24"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # one host, one /64
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("::ffff:192.0.2.7", "192.0.2.0/24"),  # IPv4-mapped: the IPv4 /24
    ("fe80::1%eth0", "fe80::/64"),  # a zone index is not part of the address
    ("::1", "::/64"),
    ("", ""),  # a Unix socket: one bucket
    ("not-an-address", "not-an-address"),
])
def test_network_of(address, network):
    assert network_of(address) == network


def test_one_address_is_capped_and_its_newcomer_refused():
    a = Admission(total=100, reserve=10, per_network=50, per_address=3)
    for _ in range(3):
        assert a.arrive(conn(), "10.0.0.1").admit
    d = a.arrive(conn(), "10.0.0.1")
    assert not d.admit and d.reason == "address" and d.evict == ()
    assert a.arrive(conn(), "10.0.0.2").admit  # another address of the network is not


def test_a_full_network_makes_room_from_its_busiest_address_for_another_address():
    a = Admission(total=100, reserve=10, per_network=4, per_address=4)
    flood = [conn() for _ in range(4)]
    for c in flood:
        assert a.arrive(c, "10.0.0.9").admit
    d = a.arrive(legit := conn(), "10.0.0.1")  # same /24, another address
    assert d.admit and d.evict == (flood[0],)  # the oldest idle one
    assert a.unauthenticated == 4
    # the flood's address again: no address of its network holds two more than it: refused
    d = a.arrive(conn(), "10.0.0.9")
    assert not d.admit and d.reason == "network" and d.evict == ()
    assert legit in a.members()


def test_a_network_of_equal_addresses_refuses_the_newcomer_of_an_equal_address():
    a = Admission(total=100, reserve=10, per_network=4, per_address=2)
    for address in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"):
        assert a.arrive(conn(), address).admit
    d = a.arrive(conn(), "10.0.0.3")  # holds 0, the busiest hold 2: 2 >= 0 + 2, room is made
    assert d.admit and len(d.evict) == 1
    d = a.arrive(conn(), "10.0.0.4")  # holds 0, the busiest now hold 2 (one) and 1: room again
    assert d.admit and len(d.evict) == 1
    d = a.arrive(conn(), "10.0.0.5")  # every address holds 1: nobody has two more than 0
    assert not d.admit and d.reason == "network"


def test_only_idle_connections_are_evicted():
    a = Admission(total=100, reserve=10, per_network=2, per_address=2)
    busy = [conn(), conn()]
    for c in busy:
        assert a.arrive(c, "10.0.0.9").admit
        a.busy(c)  # its request is running
    d = a.arrive(conn(), "10.0.0.1")
    assert not d.admit and d.reason == "network"
    a.idle(busy[1])  # answered; waiting for the next request's headers
    d = a.arrive(conn(), "10.0.0.1")
    assert d.admit and d.evict == (busy[1],)


def test_the_total_keeps_room_for_token_holders_and_a_quiet_network_gets_in():
    a = Admission(total=20, reserve=4, per_network=8, per_address=8)
    flood = []
    for net in range(2):  # 16 unauthenticated connections fill the unauthenticated part
        for _ in range(8):
            c = conn()
            assert a.arrive(c, f"10.0.{net}.7").admit
            flood.append(c)
    assert a.unauthenticated == 16 == a.unauthenticated_cap
    d = a.arrive(c := conn(), "10.9.9.9")  # a quiet network: the busiest gives up its oldest idle one
    assert d.admit and d.evict == (flood[0],)
    a.authenticate(c)  # it presented a valid token: out of the unauthenticated count
    assert a.unauthenticated == 15 and a.authenticated == 1
    # token holders may use the reserve: connections that authenticate at once fill up to the total
    for _ in range(4):
        c = conn()
        assert a.arrive(c, "10.9.9.9").admit
        a.authenticate(c)
    assert a.open == 20 == a.total
    # everything is full now: a newcomer evicts an idle unauthenticated one, never a token holder
    d = a.arrive(conn(), "10.9.9.8")
    assert d.admit and d.evict[0] in flood
    assert a.authenticated == 5


def test_a_flood_network_newcomer_does_not_evict_a_smaller_network():
    a = Admission(total=10, reserve=2, per_network=8, per_address=8)
    for _ in range(6):
        assert a.arrive(conn(), "10.0.0.9").admit
    for _ in range(2):
        assert a.arrive(conn(), "10.0.1.9").admit
    d = a.arrive(conn(), "10.0.0.8")  # full (8): its own network is the busiest, same-sized address: none
    assert d.admit and d.evict  # 10.0.0.9 holds 6 >= 0 + 2 within the newcomer's own network
    d = a.arrive(conn(), "10.0.0.9")  # the flood's address: nobody in any network has 2 more than it
    assert not d.admit and d.reason == "busy"


def test_authenticated_connections_are_never_evicted_and_leave_frees_their_slot():
    a = Admission(total=4, reserve=1, per_network=4, per_address=4)
    held = [conn() for _ in range(4)]
    for c in held:
        assert a.arrive(c, "10.0.0.1").admit
        a.authenticate(c)
    d = a.arrive(conn(), "10.0.9.9")
    assert not d.admit and d.reason == "busy" and d.evict == ()
    a.leave(held[0])
    a.leave(held[0])  # twice: no effect
    assert a.open == 3 and a.arrive(conn(), "10.0.9.9").admit


def test_reserve_must_leave_room():
    with pytest.raises(ValueError):
        Admission(total=4, reserve=4, per_network=1, per_address=1)


_step = st.tuples(st.sampled_from(["arrive", "busy", "idle", "auth", "leave"]),
                  st.integers(0, 3), st.integers(0, 3), st.integers(0, 40))


@hsettings(max_examples=300, deadline=None)
@given(steps=st.lists(_step, max_size=120))
def test_the_counts_always_match_the_members_and_the_caps_hold(steps):
    """Whatever happens, the caps hold and the counters agree with the members."""
    a = Admission(total=12, reserve=3, per_network=5, per_address=3)
    alive: list[int] = []
    authed: set[int] = set()
    for op, net, host, pick in steps:
        if op == "arrive":
            c = conn()
            d = a.arrive(c, f"10.0.{net}.{host}")
            for v in d.evict:
                assert v in alive and v not in authed  # only unauthenticated connections are evicted
                alive.remove(v)
            if d.admit:
                alive.append(c)
        elif alive:
            c = alive[pick % len(alive)]
            if op == "busy":
                a.busy(c)
            elif op == "idle":
                a.idle(c)
            elif op == "auth":
                a.authenticate(c)
                authed.add(c)
            else:
                a.leave(c)
                alive.remove(c)
                authed.discard(c)
        assert sorted(a.members()) == sorted(alive)
        assert a.authenticated == len(authed & set(alive))
        assert a.unauthenticated == len(alive) - a.authenticated
        assert a.unauthenticated <= a.unauthenticated_cap and a.open <= a.total
        per_address: dict[str, int] = {}
        per_network: dict[str, int] = {}
        for c in alive:
            if c not in authed:
                m = a._members[c]
                per_address[m.address] = per_address.get(m.address, 0) + 1
                per_network[m.network] = per_network.get(m.network, 0) + 1
        assert all(n <= a.per_address for n in per_address.values())
        assert all(n <= a.per_network for n in per_network.values())
