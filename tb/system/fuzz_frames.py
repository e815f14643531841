"""Fast frame building for the fuzz campaign, checked against scapy.

:func:`sim.packets.build_frame` builds every frame with scapy (and scapy's own ICRC): ~5–25 ms a
frame, which alone would take most of an hour for a 100,000-frame campaign. :func:`fast_frame`
takes the same arguments and packs the same bytes with ``struct`` (ICRC by
:func:`sim.packets.icrc`). :class:`CheckedBuilder` builds with it and compares the result with
scapy's ``build_frame`` for the first ``check_first`` frames and then one frame in ``check_every``
(all of them with ``check_every=1``), raising on the first difference: the campaign's frames are
scapy's frames, at a fraction of the cost.
"""

import struct

from rnic import wire
from sim.packets import (LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, ext_headers,
                         icrc as _icrc)

__all__ = ["fast_frame", "CheckedBuilder"]


def _ip_checksum(hdr):
    s = sum(struct.unpack(">10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def fast_frame(opcode, payload=b"", *, psn=0, dqpn=0x11, se=0, mig=0, ackreq=0, pkey=0xFFFF,
               fecn=0, becn=0, resv6=0, resv7=0, tver=0, padcnt=None, ext=None,
               reth=None, imm=0, ieth=0, aeth=None,
               src_mac=REMOTE_MAC, dst_mac=LOCAL_MAC, src_ip=REMOTE_IP, dst_ip=LOCAL_IP,
               sport=0xC123, dport=wire.ROCE_UDP_PORT, tos=0, ttl=64, ip_id=0, df=True,
               udp_chksum=0, icrc=None, min_len=wire.MIN_FRAME):
    """The bytes :func:`sim.packets.build_frame` returns for the same arguments."""
    if ext is None:
        ext = ext_headers(opcode, reth=reth, imm=imm, ieth=ieth, aeth=aeth)
    if padcnt is None:
        padcnt = (-len(payload)) & 3
    body = bytes(ext) + bytes(payload) + bytes(padcnt)
    udp_len = 8 + 12 + len(body) + 4
    ip_len = 20 + udp_len
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, tos & 0xFF, ip_len & 0xFFFF,
                               ip_id & 0xFFFF, 0x4000 if df else 0, ttl & 0xFF, 17, 0,
                               (src_ip & 0xFFFFFFFF).to_bytes(4, "big"),
                               (dst_ip & 0xFFFFFFFF).to_bytes(4, "big")))
    ip[10:12] = _ip_checksum(ip).to_bytes(2, "big")
    udp = struct.pack(">HHHH", sport & 0xFFFF, dport & 0xFFFF, udp_len & 0xFFFF,
                      udp_chksum & 0xFFFF)
    bth = struct.pack(">BBHII", opcode & 0xFF,
                      (se & 1) << 7 | (mig & 1) << 6 | (padcnt & 3) << 4 | (tver & 15),
                      pkey & 0xFFFF,
                      (fecn & 1) << 31 | (becn & 1) << 30 | (resv6 & 63) << 24 | dqpn & 0xFFFFFF,
                      (ackreq & 1) << 31 | (resv7 & 127) << 24 | psn & 0xFFFFFF)
    dgram = bytes(ip) + udp + bth + body
    crc = _icrc(dgram) if icrc is None else struct.pack(">I", icrc & 0xFFFFFFFF)
    eth = (dst_mac & (1 << 48) - 1).to_bytes(6, "big") + \
        (src_mac & (1 << 48) - 1).to_bytes(6, "big") + b"\x08\x00"
    return (eth + dgram + crc).ljust(min_len, b"\0")


class CheckedBuilder:
    """``build(opcode, payload, **kw)``: :func:`fast_frame`, compared with scapy's
    ``build_frame`` for the first ``check_first`` frames and one in ``check_every`` after."""

    def __init__(self, check_first=200, check_every=100):
        self.check_first, self.check_every = check_first, check_every
        self.built = 0
        self.checked = 0

    def __call__(self, opcode, payload=b"", **kw):
        f = fast_frame(opcode, payload, **kw)
        self.built += 1
        if self.built <= self.check_first or self.built % self.check_every == 0:
            ref = build_frame(opcode, payload, **kw)
            if ref != f:
                raise AssertionError(f"fast_frame differs from scapy's build_frame for "
                                     f"opcode {opcode:#x} {kw}: {f.hex()} != {ref.hex()}")
            self.checked += 1
        return f
