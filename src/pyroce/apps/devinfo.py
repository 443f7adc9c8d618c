"""What ``ibv_devices`` and ``ibv_devinfo`` print, line for line (``device_list.c`` and
``devinfo.c`` of rdma-core v44, the Debian bookworm tools), from a Context's own queries.

The extended capabilities pyroce does not offer (TSO, RSS, packet pacing, tag matching)
print as ``devinfo`` prints them for a device whose ``ibv_query_device_ex`` leaves them zero.
"""

from __future__ import annotations

import socket

from pyroce.verbs.device import Context, Device, ODPCaps
from pyroce.verbs.enums import (
    ibv_atomic_cap,
    ibv_device_cap_flags,
    ibv_gid_type_sysfs,
    ibv_link_layer,
    ibv_odp_general_caps,
    ibv_odp_transport_cap_bits,
    ibv_port_state,
    ibv_transport_type,
)

TRANSPORTS = {ibv_transport_type.IBV_TRANSPORT_IB: "InfiniBand", ibv_transport_type.IBV_TRANSPORT_IWARP: "iWARP"}
PORT_STATES = {ibv_port_state.IBV_PORT_DOWN: "PORT_DOWN", ibv_port_state.IBV_PORT_INIT: "PORT_INIT",
               ibv_port_state.IBV_PORT_ARMED: "PORT_ARMED", ibv_port_state.IBV_PORT_ACTIVE: "PORT_ACTIVE"}  # fmt: skip
PHYS_STATES = {1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING", 5: "LINK_UP",
               6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}  # fmt: skip
ATOMIC_CAPS = {ibv_atomic_cap.IBV_ATOMIC_NONE: "ATOMIC_NONE", ibv_atomic_cap.IBV_ATOMIC_HCA: "ATOMIC_HCA",
               ibv_atomic_cap.IBV_ATOMIC_GLOB: "ATOMIC_GLOB"}  # fmt: skip
MTUS = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
WIDTHS = {1: "1", 2: "4", 4: "8", 8: "12", 16: "2"}
SPEEDS = {1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps", 16: "14.0 Gbps", 32: "25.0 Gbps",
          64: "50.0 Gbps", 128: "100.0 Gbps"}  # fmt: skip
VLS = {1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}
LINK_LAYERS = {ibv_link_layer.IBV_LINK_LAYER_UNSPECIFIED: "Unspecified",
               ibv_link_layer.IBV_LINK_LAYER_INFINIBAND: "InfiniBand",
               ibv_link_layer.IBV_LINK_LAYER_ETHERNET: "Ethernet"}  # fmt: skip
CAP_TABS = "\t\t\t\t\t"  # devinfo.c's PRINT_TAB_SPACES
ODP_GENERAL = ((ibv_odp_general_caps.IBV_ODP_SUPPORT, "ODP_SUPPORT"),
               (ibv_odp_general_caps.IBV_ODP_SUPPORT_IMPLICIT, "ODP_SUPPORT_IMPLICIT"))  # fmt: skip
ODP_TRANSPORT = tuple((getattr(ibv_odp_transport_cap_bits, f"IBV_ODP_SUPPORT_{name}"), f"SUPPORT_{label}")
                      for name, label in (("SEND", "SEND"), ("RECV", "RECV"), ("WRITE", "WRITE"), ("READ", "READ"),
                                          ("ATOMIC", "ATOMIC"), ("SRQ_RECV", "SRQ")))  # fmt: skip
NO_CLOCK = ("\tcompletion_timestamp_mask not supported", "\tcore clock not supported")
NO_EXTENDED_CAPS = ("\ttso_caps:", "\t\tmax_tso:\t\t\t0", "\trss_caps:",
                    "\t\tmax_rwq_indirection_tables:\t\t\t0", "\t\tmax_rwq_indirection_table_size:\t\t\t0",
                    "\t\trx_hash_function:\t\t\t\t0x0", "\t\trx_hash_fields_mask:\t\t\t\t0x0",
                    "\tmax_wq_type_rq:\t\t\t0", "\tpacket_pacing_caps:", "\t\tqp_rate_limit_min:\t0kbps",
                    "\t\tqp_rate_limit_max:\t0kbps", "\ttag matching not supported")  # fmt: skip


def devices_lines(devices: list[tuple[str, int]]) -> list[str]:
    """``ibv_devices``: each device's name and node GUID (as a number)."""
    rows = [f"    {name:<16}\t{guid:016x}" for name, guid in devices]
    return [f"    {'device':<16}\t   node GUID", f"    {'------':<16}\t----------------", *rows]


def guid_str(guid: int) -> str:
    return ":".join(f"{guid >> shift & 0xFFFF:04x}" for shift in (48, 32, 16, 0))


def devinfo_lines(ctx: Context, device: Device, ib_port: int, verbose: bool) -> list[str]:
    """``print_hca_cap``: the device, then each port (or only ``ib_port`` when not 0), each
    port ending with an empty line. ``ValueError`` for a port the device does not have."""
    attr = ctx.query_device()
    if ib_port > attr.phys_port_cnt:
        raise ValueError("Invalid port requested for device")
    lines = [f"hca_id:\t{ctx.name}",
             f"\ttransport:\t\t\t{TRANSPORTS.get(device.transport_type, 'invalid transport')} ({device.transport_type})",
             *([f"\tfw_ver:\t\t\t\t{attr.fw_ver}"] if attr.fw_ver else []),
             f"\tnode_guid:\t\t\t{guid_str(attr.node_guid)}", f"\tsys_image_guid:\t\t\t{guid_str(attr.sys_image_guid)}",
             f"\tvendor_id:\t\t\t0x{attr.vendor_id:04x}", f"\tvendor_part_id:\t\t\t{attr.vendor_part_id}",
             f"\thw_ver:\t\t\t\t0x{attr.hw_ver:X}", f"\tphys_port_cnt:\t\t\t{attr.phys_port_cnt}"]  # fmt: skip
    if verbose:
        lines += device_verbose_lines(ctx)
    for port in range(1, attr.phys_port_cnt + 1):
        if ib_port and port != ib_port:
            continue
        lines += port_lines(ctx, port, device.transport_type, verbose)
        lines.append("")
    return lines


def device_verbose_lines(ctx: Context) -> list[str]:
    a = ctx.query_device()
    lines = [f"\tmax_mr_size:\t\t\t0x{a.max_mr_size:x}", f"\tpage_size_cap:\t\t\t0x{a.page_size_cap:x}",
             f"\tmax_qp:\t\t\t\t{a.max_qp}", f"\tmax_qp_wr:\t\t\t{a.max_qp_wr}",
             f"\tdevice_cap_flags:\t\t0x{a.device_cap_flags:08x}",
             *(CAP_TABS + flag.name.removeprefix("IBV_DEVICE_") for flag in ibv_device_cap_flags
               if a.device_cap_flags & flag),
             f"\tmax_sge:\t\t\t{a.max_sge}",
             f"\tmax_sge_rd:\t\t\t{a.max_sge_rd}", f"\tmax_cq:\t\t\t\t{a.max_cq}", f"\tmax_cqe:\t\t\t{a.max_cqe}",
             f"\tmax_mr:\t\t\t\t{a.max_mr}", f"\tmax_pd:\t\t\t\t{a.max_pd}",
             f"\tmax_qp_rd_atom:\t\t\t{a.max_qp_rd_atom}", f"\tmax_ee_rd_atom:\t\t\t{a.max_ee_rd_atom}",
             f"\tmax_res_rd_atom:\t\t{a.max_res_rd_atom}", f"\tmax_qp_init_rd_atom:\t\t{a.max_qp_init_rd_atom}",
             f"\tmax_ee_init_rd_atom:\t\t{a.max_ee_init_rd_atom}",
             f"\tatomic_cap:\t\t\t{ATOMIC_CAPS.get(a.atomic_caps, 'invalid atomic capability')} ({a.atomic_caps})",
             f"\tmax_ee:\t\t\t\t{a.max_ee}", f"\tmax_rdd:\t\t\t{a.max_rdd}", f"\tmax_mw:\t\t\t\t{a.max_mw}",
             f"\tmax_raw_ipv6_qp:\t\t{a.max_raw_ipv6_qp}", f"\tmax_raw_ethy_qp:\t\t{a.max_raw_ethy_qp}",
             f"\tmax_mcast_grp:\t\t\t{a.max_mcast_grp}", f"\tmax_mcast_qp_attach:\t\t{a.max_mcast_qp_attach}",
             f"\tmax_total_mcast_qp_attach:\t{a.max_total_mcast_qp_attach}", f"\tmax_ah:\t\t\t\t{a.max_ah}",
             f"\tmax_fmr:\t\t\t{a.max_fmr}",
             *([f"\tmax_map_per_fmr:\t\t{a.max_map_per_fmr}"] if a.max_fmr else []),
             f"\tmax_srq:\t\t\t{a.max_srq}",
             *([f"\tmax_srq_wr:\t\t\t{a.max_srq_wr}", f"\tmax_srq_sge:\t\t\t{a.max_srq_sge}"] if a.max_srq else []),
             f"\tmax_pkeys:\t\t\t{a.max_pkeys}", f"\tlocal_ca_ack_delay:\t\t{a.local_ca_ack_delay}"]  # fmt: skip
    ex = ctx.query_device_ex()  # devinfo.c names the bits above 31 of device_cap_flags_ex only: none here
    return [*lines, *odp_lines(ex.odp_caps), *NO_CLOCK, f"\tdevice_cap_flags_ex:\t\t0x{ex.device_cap_flags_ex:X}",
            *NO_EXTENDED_CAPS, f"\tnum_comp_vectors:\t\t{ctx.num_comp_vectors}"]  # fmt: skip


def odp_lines(caps: ODPCaps) -> list[str]:
    """devinfo.c's ``print_odp_caps``: the general bits, then each transport's."""
    lines = ["\tgeneral_odp_caps:", *(CAP_TABS + name for bit, name in ODP_GENERAL if caps.general_caps & bit)]
    unknown = caps.general_caps & ~sum(bit for bit, _ in ODP_GENERAL)
    if unknown:
        lines.append(f"{CAP_TABS}unknown general caps (0x{unknown:x})")
    for kind in ("rc", "uc", "ud", "xrc"):
        bits = getattr(caps, f"{kind}_odp_caps")
        lines += [f"\t{kind}_odp_caps:", *(CAP_TABS + name for bit, name in ODP_TRANSPORT if bits & bit)]
        unknown = bits & ~sum(bit for bit, _ in ODP_TRANSPORT)
        if not bits:
            lines.append(CAP_TABS + "NO SUPPORT")
        elif unknown:
            lines.append(f"{CAP_TABS}unknown transport capability (0x{unknown:x})")
    return lines


def port_lines(ctx: Context, port: int, transport_type: int, verbose: bool) -> list[str]:
    p = ctx.query_port(port)
    lines = [f"\t\tport:\t{port}", f"\t\t\tstate:\t\t\t{PORT_STATES.get(p.state, 'invalid state')} ({p.state})",
             f"\t\t\tmax_mtu:\t\t{MTUS.get(p.max_mtu, 'invalid MTU')} ({p.max_mtu})",
             f"\t\t\tactive_mtu:\t\t{MTUS.get(p.active_mtu, 'invalid MTU')} ({p.active_mtu})",
             f"\t\t\tsm_lid:\t\t\t{p.sm_lid}", f"\t\t\tport_lid:\t\t{p.lid}", f"\t\t\tport_lmc:\t\t0x{p.lmc:02x}",
             f"\t\t\tlink_layer:\t\t{LINK_LAYERS.get(p.link_layer, 'Unknown')}"]  # fmt: skip
    if not verbose:
        return lines
    lines += [f"\t\t\tmax_msg_sz:\t\t0x{p.max_msg_sz:x}", f"\t\t\tport_cap_flags:\t\t0x{p.port_cap_flags:08x}",
              f"\t\t\tport_cap_flags2:\t0x{p.port_cap_flags2:04x}",
              f"\t\t\tmax_vl_num:\t\t{VLS.get(p.max_vl_num, 'invalid value')} ({p.max_vl_num})",
              f"\t\t\tbad_pkey_cntr:\t\t0x{p.bad_pkey_cntr:x}", f"\t\t\tqkey_viol_cntr:\t\t0x{p.qkey_viol_cntr:x}",
              f"\t\t\tsm_sl:\t\t\t{p.sm_sl}", f"\t\t\tpkey_tbl_len:\t\t{p.pkey_tbl_len}",
              f"\t\t\tgid_tbl_len:\t\t{p.gid_tbl_len}", f"\t\t\tsubnet_timeout:\t\t{p.subnet_timeout}",
              f"\t\t\tinit_type_reply:\t{p.init_type_reply}",
              f"\t\t\tactive_width:\t\t{WIDTHS.get(p.active_width, 'invalid width')}X ({p.active_width})",
              f"\t\t\tactive_speed:\t\t{SPEEDS.get(p.active_speed, 'invalid speed')} ({p.active_speed})"]  # fmt: skip
    if transport_type == ibv_transport_type.IBV_TRANSPORT_IB:
        lines.append(f"\t\t\tphys_state:\t\t{PHYS_STATES.get(p.phys_state, 'invalid physical state')} ({p.phys_state})")
    return lines + gid_lines(ctx, port, p.gid_tbl_len, p.link_layer == ibv_link_layer.IBV_LINK_LAYER_ETHERNET)


def gid_lines(ctx: Context, port: int, count: int, with_type: bool) -> list[str]:
    """``print_all_port_gids``: the GIDs whose interface id is not zero, RoCE v2 ones as
    ``inet_ntop`` text, v1 ones as eight groups of hex digits; the type only on Ethernet."""
    lines = []
    for index in range(count):
        raw = ctx.query_gid(port, index).raw
        if not any(raw[8:]):
            continue
        is_v2 = ctx.query_gid_type(port, index) == ibv_gid_type_sysfs.IBV_GID_TYPE_SYSFS_ROCE_V2
        text = (
            socket.inet_ntop(socket.AF_INET6, raw) if is_v2 else ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))
        )
        kind = (", RoCE v2" if is_v2 else ", RoCE v1") if with_type else ""
        lines.append(f"\t\t\tGID[{index:3d}]:\t\t{text}{kind}")
    return lines
