"""``pyroce devices`` and ``pyroce devinfo`` print what ``ibv_devices`` and ``ibv_devinfo``
print: the same labels, tabs and value formats, checked against rxe's output."""

from __future__ import annotations

import io
import ipaddress

import pytest

from pyroce.cli import main
from pyroce.verbs.device import Context
from tests.cli import assert_one_line_error, pyroce

# `ibv_devinfo -d rxe0` of an rxe on a 1500-byte virtio NIC, as devinfo.c (rdma-core v44.0) prints it:
# its format strings with the values rxe reports (fw_ver from its 0 firmware version, the GUID from
# the MAC, vendor_id 0xffffff); not a capture of a run
RXE_DEVINFO = """\
hca_id:\trxe0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t0.0.0
\tnode_guid:\t\t\t5054:00ff:fe12:3456
\tsys_image_guid:\t\t\t5054:00ff:fe12:3456
\tvendor_id:\t\t\t0xffffff
\tvendor_part_id:\t\t\t0
\thw_ver:\t\t\t\t0x0
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet

"""
RXE_DEVICES = "    device          \t   node GUID\n    ------          \t----------------\n    rxe0            \t505400fffe123456\n"
SAME_VALUES = ("transport", "vendor_id", "vendor_part_id", "hw_ver", "phys_port_cnt", "port", "state", "max_mtu",
               "sm_lid", "port_lid", "port_lmc", "link_layer")  # fmt: skip


def run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


def split(line: str) -> tuple[str, str]:
    """A devinfo line as (label with its tabs, value)."""
    label, _, value = line.partition(":")
    tabs = len(value) - len(value.lstrip("\t"))
    return label + ":" + value[:tabs], value[tabs:]


def test_devinfo_lays_out_every_line_as_rxes():
    ours, theirs = run("devinfo").split("\n"), RXE_DEVINFO.split("\n")
    assert len(ours) == len(theirs)
    for mine, rxe in zip(ours, theirs, strict=True):
        (label, value), (rxe_label, rxe_value) = split(mine), split(rxe)
        assert label == rxe_label
        if label.strip().rstrip(":") in SAME_VALUES:
            assert value == rxe_value
    assert ours[0] == "hca_id:\tpyroce0"


def test_devinfo_node_guid_is_the_link_local_gids_interface_id():
    """The EUI-64 of the port's MAC, as rxe and mlx5 make it."""
    with Context() as ctx:
        gid = ctx.query_gid(1, 0).raw
    text = run("devinfo")
    guid = ":".join(gid[i : i + 2].hex() for i in range(8, 16, 2))
    assert f"\tnode_guid:\t\t\t{guid}\n" in text


def test_devinfo_verbose_lists_the_gid_table():
    """ibv_devinfo's two ways: a RoCE v2 GID through inet_ntop, others as eight groups."""
    text = run("devinfo", "-v", "-d", "pyroce0", "-i", "1")
    with Context() as ctx:
        address = ctx.query_gid(1, 3).ipv4()
        link_local = ctx.query_gid(1, 0)
    ip = ipaddress.IPv4Address(address).packed
    mapped = f"{ip[:2].hex()}:{ip[2:].hex()}"
    gids = (f"\t\t\tGID[  0]:\t\t{link_local.gid}, RoCE v1\n"
            f"\t\t\tGID[  1]:\t\t{ipaddress.IPv6Address(link_local.raw)}, RoCE v2\n"
            f"\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:{mapped}, RoCE v1\n"
            f"\t\t\tGID[  3]:\t\t::ffff:{address}, RoCE v2\n")  # fmt: skip
    assert "\t\t\tgid_tbl_len:\t\t16\n" in text
    assert "\tmax_qp_wr:\t\t\t16384\n\tdevice_cap_flags:\t\t0x00023cc6\n\t\t\t\t\tBAD_PKEY_CNTR\n" in text
    assert "\t\t\t\t\tMEM_WINDOW\n\tmax_sge:" in text and "\tdevice_cap_flags_ex:\t\t0x23CC6\n" in text
    assert "\tgeneral_odp_caps:\n\t\t\t\t\tODP_SUPPORT\n\trc_odp_caps:\n\t\t\t\t\tSUPPORT_SEND\n" in text
    assert "\txrc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n" in text
    assert text.endswith("\t\t\tphys_state:\t\tLINK_UP (5)\n" + gids + "\n")


def test_devinfo_list():
    assert run("devinfo", "-l") == "1 HCA found:\n\tpyroce0\n\n"


def test_devices_lays_out_as_ibv_devices():
    ours = run("devices").split("\n")
    assert ours[:2] == RXE_DEVICES.split("\n")[:2]
    name, guid = ours[2].split("\t")
    assert name == "    pyroce0         " and len(guid) == 16 and int(guid, 16)


@pytest.mark.parametrize(("argv", "words"), [(("-d", "mlx5_0"), ("IB device 'mlx5_0' wasn't found",)),
                                             (("-i", "2"), ("Invalid port requested for device",)),
                                             (("-i", "0"), ("--ib-port",))])  # fmt: skip
def test_devinfo_errors_are_one_line(argv, words):
    assert_one_line_error(pyroce("devinfo", *argv, timeout=30), *words)
