"""The sockets a run with a limited network may open: a seccomp filter, beside Landlock.

Landlock's network rules (``--net none`` and ``model``) hold TCP's ``connect`` to the ports a
run was given, and nothing else: an MPTCP socket (``IPPROTO_MPTCP``) connects to any port
past them, and so would SCTP or any other protocol a kernel offers. So such a run may open, of
the internet's families, only plain TCP and UDP sockets (an allow-list: a protocol the kernel
adds later is refused too), and of the rest only unix and netlink sockets (a resolver needs
them); ``io_uring``, which opens sockets without the system call, is refused. A refused call
fails with ``EPROTONOSUPPORT`` / ``EAFNOSUPPORT`` (``EPERM`` for ``io_uring``), as on a kernel
without the protocol: programs fall back as they would there.

What it leaves: UDP (under ``--net model`` a resolver needs it; under ``--net none`` a run's
world has no network to send it to), and a unix socket by path (a run's world holds no
socket it was not given).

Like ``landlock``, this runs inside the launcher script, with the standard library's smallest
parts only; it must run after ``no_new_privs`` is set (``landlock.restrict`` sets it).
"""

from __future__ import annotations

import ctypes
import os

#: Per architecture: its audit number, and the numbers of ``socket`` and ``io_uring_setup``.
_ARCH = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_X32 = 0x40000000  # x86_64's x32 calls: the same numbers with this bit
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_SOCK_STREAM, _SOCK_DGRAM, _SOCK_TYPE = 1, 2, 0xF
_IPPROTO_TCP, _IPPROTO_UDP = 6, 17
_EPERM, _EAFNOSUPPORT, _EPROTONOSUPPORT = 1, 97, 93
_LD, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_NR, _ARCH_AT, _ARG = 0, 4, 16  # offsets in ``struct seccomp_data``; an argument's low word at 16 + 8 * n


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _program(arch: int, socket: int, uring: int) -> list[tuple[str, int, str, str, int]]:
    """The filter, a line each: (its label, code, label if true, label if false, k); "": none,
    or the next line."""
    return [
        ("", _LD, "", "", _ARCH_AT),
        ("", _JEQ, "", "perm", arch),
        ("", _LD, "", "", _NR),
        ("", _JGE, "perm", "", _X32),
        ("", _JEQ, "perm", "", uring),
        ("", _JEQ, "", "allow", socket),
        ("", _LD, "", "", _ARG),  # the family
        ("", _JEQ, "allow", "", _AF_UNIX),
        ("", _JEQ, "allow", "", _AF_NETLINK),
        ("", _JEQ, "inet", "", _AF_INET),
        ("", _JEQ, "inet", "no_af", _AF_INET6),
        ("inet", _LD, "", "", _ARG + 16),  # the protocol
        ("", _JEQ, "allow", "", _IPPROTO_TCP),
        ("", _JEQ, "allow", "", _IPPROTO_UDP),
        ("", _JEQ, "", "no_proto", 0),
        ("", _LD, "", "", _ARG + 8),  # the type, when the protocol is its own: plain stream or datagram only
        ("", _AND, "", "", _SOCK_TYPE),
        ("", _JEQ, "allow", "", _SOCK_STREAM),
        ("", _JEQ, "allow", "no_proto", _SOCK_DGRAM),
        ("allow", _RET, "", "", _ALLOW),
        ("perm", _RET, "", "", _ERRNO | _EPERM),
        ("no_af", _RET, "", "", _ERRNO | _EAFNOSUPPORT),
        ("no_proto", _RET, "", "", _ERRNO | _EPROTONOSUPPORT),
    ]


def restrict() -> None:
    """Hold this process and all it starts to the sockets the module says; ``OSError`` if the
    kernel will not (the step must then not run)."""
    found = _ARCH.get(os.uname().machine)
    if found is None:
        raise OSError(f"no seccomp filter known for {os.uname().machine}")
    lines = _program(*found)
    at = {label: n for n, (label, *_) in enumerate(lines) if label}
    code = (_Filter * len(lines))()
    for n, (_, op, yes, no, k) in enumerate(lines):
        code[n] = _Filter(op, at[yes] - n - 1 if yes else 0, at[no] - n - 1 if no else 0, k)
    program = _Program(len(lines), code)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise OSError(f"seccomp: {os.strerror(ctypes.get_errno())}")
