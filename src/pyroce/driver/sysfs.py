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
from pyroce.ib.addressing import node_guid_of, roce_gid

DEVICE = "pyroce0"
UVERBS_ABI_VERSION = 6  # /sys/class/infiniband_verbs/abi_version, as Linux 6.x
RDMA_CM_ABI_VERSION = 4  # /sys/class/misc/rdma_cm/abi_version (what librdmacm 44 wants)


def _hex_groups(data: bytes) -> str:
    """sysfs's GID and GUID form: groups of four hex digits joined by colons."""
    text = data.hex()
    return ":".join(text[i : i + 4] for i in range(0, len(text), 4))


def sysfs_files(address: str) -> dict[str, str]:
    """Each file of the tree (its path under ``/sys``) and its contents, for pyroce0 on ``address``."""
    gid = roce_gid(address)
    netdev = netdev_name(address) or "lo"
    device, port = f"class/infiniband/{DEVICE}", f"class/infiniband/{DEVICE}/ports/1"
    return {
        f"{device}/node_guid": _hex_groups(node_guid_of(gid).to_bytes(8, "big")),
        f"{device}/sys_image_guid": _hex_groups(node_guid_of(gid).to_bytes(8, "big")),
        f"{device}/node_type": "1: CA",
        f"{device}/node_desc": f"{DEVICE} pyroce RoCEv2 NIC",
        f"{device}/device/net/{netdev}/ifindex": str(socket.if_nametoindex(netdev)),
        f"{port}/gids/0": _hex_groups(gid),
        f"{port}/gid_attrs/types/0": "RoCE v2",
        f"{port}/gid_attrs/ndevs/0": netdev,
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
