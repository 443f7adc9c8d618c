"""What Linux shows in sysfs for an RDMA device, written for pyroce0 into a folder of pyroce's.

Programs find an RDMA device's network interface, GIDs and ABI versions in sysfs: rdma-core's
tests take their IP address from ``/sys/class/infiniband/<dev>/device/net/``, librdmacm reads
``/sys/class/misc/rdma_cm/abi_version``. pyroce's device is no kernel device and writes nothing
under ``/sys``: the preloaded library (``c/rdma_cm_sysfs.c``) reads those folders from the tree
this module writes, the one ``PYROCE_SYSFS`` names, as rxe's look for the same address.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

from pyroce.host.registry import netdev_name
from pyroce.ib.addressing import GID_TABLE_LEN, ROCE_V1, ROCE_V2, gid_table, node_guid_of

DEVICE = "pyroce0"
UVERBS_ABI_VERSION = 6  # /sys/class/infiniband_verbs/abi_version, as Linux 6.x
RDMA_CM_ABI_VERSION = 4  # /sys/class/misc/rdma_cm/abi_version (what librdmacm 44 wants)
GID_TYPE_NAMES = {ROCE_V1: "IB/RoCE v1", ROCE_V2: "RoCE v2"}  # gid_attrs/types/N, as the kernel writes them


def _hex_groups(data: bytes) -> str:
    """sysfs's GID and GUID form: groups of four hex digits joined by colons."""
    text = data.hex()
    return ":".join(text[i : i + 4] for i in range(0, len(text), 4))


def _gid_files(port: str, address: str, netdev: str) -> dict[str, str]:
    """The port's GID table (``gid_table``) as the kernel shows it: ``gids/N``, and the type
    (its ``ib_cache_gid_type_str``) and netdev of each entry under ``gid_attrs`` (an empty
    entry: a zero GID, and no type or netdev to read)."""
    files = {f"{port}/gids/{index}": _hex_groups(bytes(16)) for index in range(GID_TABLE_LEN)}  # empty: zero
    for index, (gid, version) in enumerate(gid_table(address)):
        files[f"{port}/gids/{index}"] = _hex_groups(gid)
        files[f"{port}/gid_attrs/types/{index}"] = GID_TYPE_NAMES[version]
        files[f"{port}/gid_attrs/ndevs/{index}"] = netdev
    return files


def sysfs_files(address: str) -> dict[str, str]:
    """Each file of the tree (its path under ``/sys``) and its contents, for pyroce0 on ``address``."""
    netdev = netdev_name(address) or "lo"
    device, port = f"class/infiniband/{DEVICE}", f"class/infiniband/{DEVICE}/ports/1"
    return {
        f"{device}/node_guid": _hex_groups(node_guid_of(address).to_bytes(8, "big")),
        f"{device}/sys_image_guid": _hex_groups(node_guid_of(address).to_bytes(8, "big")),
        f"{device}/node_type": "1: CA",
        f"{device}/node_desc": f"{DEVICE} pyroce RoCEv2 NIC",
        f"{device}/device/net/{netdev}/ifindex": str(socket.if_nametoindex(netdev)),
        **_gid_files(port, address, netdev),
        f"{port}/link_layer": "Ethernet",
        f"{port}/state": "4: ACTIVE",
        f"{port}/phys_state": "5: LinkUp",
        "class/infiniband_verbs/abi_version": str(UVERBS_ABI_VERSION),
        "class/infiniband_verbs/uverbs0/ibdev": DEVICE,
        "class/infiniband_verbs/uverbs0/abi_version": "1",
        "class/misc/rdma_cm/abi_version": str(RDMA_CM_ABI_VERSION),
    }


def write_sysfs(folder: Path, address: str) -> Path:
    """The tree for ``address`` under ``folder``, named by a digest of what it holds (an
    address's netdev can change: a new tree, never a stale one); written whole in a temporary
    folder and renamed into place, so a program never reads half of one."""
    files = sysfs_files(address)
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    target = folder / f"sysfs-{digest}"
    if target.is_dir():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sysfs-", dir=folder))
    for name, text in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    try:
        os.rename(work, target)
    except OSError:  # another program wrote it first
        shutil.rmtree(work, ignore_errors=True)
    return target
