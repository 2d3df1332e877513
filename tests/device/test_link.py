"""The inter-device link of `DeviceSpec` (`LinkSpec`): figures, topology and copy prices."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mnrt
from mnrt.device.spec import MNCORE2, LinkSpec, MiB

LINK = MNCORE2.link


def test_defaults_are_an_mn_server_2_on_pcie_gen5_x16():
    assert LINK.boards == 8 and LINK.lanes == 16
    assert LINK.published_bandwidth == pytest.approx(64e9)
    # Encoding and packet overhead come off the headline figure, but not much of it.
    assert 0.85 * 64e9 < LINK.bandwidth < 63.1e9
    assert LINK.switches == 4
    assert [LINK.switch_of(d) for d in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_routes_name_each_link_direction_a_copy_crosses():
    assert LINK.route(3, 3) == ()
    assert LINK.route(0, 1) == ("b0->sw0", "sw0->b1")
    assert LINK.route(1, 0) == ("b1->sw0", "sw0->b0")  # full duplex: the other direction
    assert LINK.route(0, 5) == ("b0->sw0", "sw0->host", "host->sw2", "sw2->b5")
    # Two copies leaving one switch for others share its uplink; in and out do not.
    assert set(LINK.route(0, 2)) & set(LINK.route(1, 4)) == {"sw0->host"}
    assert not set(LINK.route(0, 2)) & set(LINK.route(2, 0))


@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 1 << 30), st.integers(0, 1 << 30))
def test_a_copy_never_costs_less_for_more_bytes_or_more_hops(src, dst, a, b):
    if src == dst:
        dst = src + 1
    small, big = sorted((a, b))
    assert LINK.copy_cost(src, dst, small).time_s <= LINK.copy_cost(src, dst, big).time_s
    assert LINK.copy_cost(src, dst, small).energy_j <= LINK.copy_cost(src, dst, big).energy_j
    near = LINK.copy_cost(0, 1, big)
    far = LINK.copy_cost(0, 2, big)
    assert near.time_s < far.time_s and near.energy_j <= far.energy_j
    whole = MNCORE2.copy_cost(src, dst, big)
    link = LINK.copy_cost(src, dst, big)
    assert whole.time_s == link.time_s and whole.energy_j >= link.energy_j
    assert whole.bound == "link" and whole.dram_bytes == 2 * big


def test_a_large_copy_runs_at_the_link_bandwidth():
    nbytes = 256 * MiB
    cost = LINK.copy_cost(0, 1, nbytes)
    assert cost.time_s == pytest.approx(nbytes / LINK.bandwidth, rel=1e-3)
    assert cost.energy_j == pytest.approx(nbytes * 2 * LINK.energy_pj_per_byte * 1e-12)
    assert LINK.copy_cost(0, 1, 0).time_s == pytest.approx(LINK.latency_s + LINK.switch_hop_s)


def test_a_local_copy_reads_and_writes_dram_once_each():
    nbytes = 64 * MiB
    local = MNCORE2.local_copy_cost(nbytes)
    assert local.bound == "dram" and local.dram_bytes == 2 * nbytes
    assert local.time_s == pytest.approx(LINK.latency_s + 2 * nbytes / MNCORE2.dram_bandwidth)
    assert MNCORE2.copy_cost(2, 2, nbytes) == local


@given(st.integers(0, 1 << 32), st.integers(0, 15), st.integers(0, 15))
def test_a_local_copy_never_costs_more_than_one_over_the_link(nbytes, src, dst):
    if src == dst:
        dst = src + 1
    local, link = MNCORE2.local_copy_cost(nbytes), MNCORE2.copy_cost(src, dst, nbytes)
    assert local.time_s <= link.time_s and local.energy_j <= link.energy_j


@pytest.mark.parametrize(
    "call",
    [
        lambda: LINK.copy_cost(1, 1, 8),
        lambda: LINK.copy_cost(0, 1, -1),
        lambda: LINK.route(-1, 0),
        lambda: LINK.route(0, 1.5),
        lambda: MNCORE2.local_copy_cost(2.5),
        lambda: MNCORE2.copy_cost(0, True, 8),
        lambda: LinkSpec(boards_per_switch=0),
        lambda: LinkSpec(latency_s=-1e-6),
    ],
)
def test_wrong_arguments_are_named(call):
    with pytest.raises(mnrt.InvalidArgumentError) as caught:
        call()
    assert any(w in str(caught.value) for w in ("device", "bytes", "LinkSpec", "local_copy"))


def test_the_link_is_part_of_the_spec_value():
    wider = dataclasses.replace(MNCORE2, link=LinkSpec(boards_per_switch=4))
    assert wider != MNCORE2 and hash(wider) != hash(MNCORE2)
    assert wider.link.route(0, 3) == ("b0->sw0", "sw0->b3")
    assert mnrt.LinkSpec is LinkSpec


def test_describe_gives_the_smi_figures():
    d = LINK.describe()
    assert d["name"] == "PCIe Gen5 x16" and d["boards_per_switch"] == 2
    assert d["latency_s"]["same_switch"] < d["latency_s"]["across_switches"]
    assert d["bandwidth"] < d["published_bandwidth"]
