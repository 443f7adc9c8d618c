"""A client process for tests of the shared NIC's reach into other processes' memory.

    python tests/foreign_child.py SIZE

Maps SIZE bytes (anonymous, read-write, filled with 0x5A), prints ``PID ADDRESS`` and then
answers one command per line of stdin, one line each:
  read OFFSET LENGTH        the bytes, in hex
  fill OFFSET LENGTH BYTE   memset, ``ok``
  protect                   the mapping becomes read-only, ``ok``
  unmap                     munmap, ``ok`` (the address is then unmapped: reads are EFAULT)
  exit                      ends the process
"""

from __future__ import annotations

import ctypes
import sys

PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20


def main() -> None:
    size = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    address = libc.mmap(None, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    ctypes.memset(address, 0x5A, size)
    print(ctypes.CDLL(None).getpid(), address, flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "read":
            offset, length = int(words[1]), int(words[2])
            print(ctypes.string_at(address + offset, length).hex(), flush=True)
        elif words[0] == "fill":
            ctypes.memset(address + int(words[1]), int(words[3]), int(words[2]))
            print("ok", flush=True)
        elif words[0] == "protect":
            libc.mprotect(address, size, PROT_READ)
            print("ok", flush=True)
        elif words[0] == "unmap":
            libc.munmap(address, size)
            print("ok", flush=True)
        elif words[0] == "exit":
            return


if __name__ == "__main__":
    main()
