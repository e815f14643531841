"""RoCEv2 frames for test benches: scapy-built frames, a decoder and Python reference checks.

* :func:`build_frame` builds any BTH opcode frame (Ether/IPv4/UDP/BTH/extended headers/payload/
  pad/ICRC) with scapy; ``scapy.contrib.roce`` fills the ICRC itself (an implementation
  independent of this project). Extended headers come from :mod:`rnic.wire` tables in the order
  of :data:`rnic.opcodes.OPCODES`; frames shorter than 60 bytes get Ethernet padding.
* :func:`decode_frame` splits a frame back into header dicts (``rnic.wire`` field names).
* :func:`icrc` is a plain-Python ICRC model (``roce-reference.md`` §1.5, IPv4 and IPv6).
* :func:`expected_meta` gives the ``rx_meta_layout`` dict RX Parse should emit for a frame and
  :func:`drop_reason` the counter (interface.md §4.5, 0 = accepted) it should count.
"""

import struct
import zlib

from rnic import wire
from rnic.opcodes import OPCODES

__all__ = [
    "LOCAL_MAC", "LOCAL_IP", "REMOTE_MAC", "REMOTE_IP",
    "mac_str", "ip_str", "ext_headers", "build_frame", "decode_frame", "icrc",
    "expected_meta", "drop_reason", "EXT_EXTRA",
]

LOCAL_MAC = 0x020000000001
LOCAL_IP = 0x0A000002            # 10.0.0.2
REMOTE_MAC = 0x020000000002
REMOTE_IP = 0x0A000001           # 10.0.0.1

#: Bytes of extended headers not in rnic.wire (AtomicETH 28, AtomicAckETH 8), after the others.
EXT_EXTRA = {op: row.hdr_len - 12 - 16 * row.reth - 4 * (row.immdt + row.ieth + row.aeth)
             for op, row in OPCODES.items()}


def mac_str(mac):
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


def ip_str(ip):
    return ".".join(str(b) for b in ip.to_bytes(4, "big"))


def ext_headers(opcode, *, reth=None, imm=0, ieth=0, aeth=None, extra=None):
    """Extended-header bytes an RC ``opcode`` carries (b"" for unknown opcodes).

    ``reth``: dict(va=, rkey=, dmalen=); ``aeth``: dict(syndrome=, msn=); ``extra``: the
    AtomicETH/AtomicAckETH bytes (zeros by default).
    """
    row = OPCODES.get(opcode)
    if row is None:
        return b""
    out = b""
    if row.reth:
        out += wire.RETH.pack(**(reth or {}))
    if row.immdt:
        out += wire.IMMDT.pack(imm=imm)
    if row.ieth:
        out += wire.IETH.pack(rkey=ieth)
    if row.aeth:
        out += wire.AETH.pack(**(aeth or {}))
    n = EXT_EXTRA[opcode]
    out += (extra if extra is not None else bytes(n))[:n].ljust(n, b"\0")
    return out


def build_frame(opcode, payload=b"", *, psn=0, dqpn=0x11, se=0, mig=0, ackreq=0, pkey=0xFFFF,
                fecn=0, becn=0, resv6=0, resv7=0, tver=0, padcnt=None, ext=None,
                reth=None, imm=0, ieth=0, aeth=None,
                src_mac=REMOTE_MAC, dst_mac=LOCAL_MAC, src_ip=REMOTE_IP, dst_ip=LOCAL_IP,
                sport=0xC123, dport=wire.ROCE_UDP_PORT, tos=0, ttl=64, ip_id=0, df=True,
                udp_chksum=0, icrc=None, min_len=wire.MIN_FRAME):
    """Bytes of one Ethernet frame (no FCS) carrying a RoCEv2 packet, ICRC by scapy.

    ``padcnt`` defaults to ``(-len(payload)) & 3`` (that many zero pad bytes follow the
    payload); ``ext`` overrides the extended headers; ``icrc`` (int, the wire bytes read
    big-endian as scapy does) overrides the computed ICRC.
    """
    from scapy.compat import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    if ext is None:
        ext = ext_headers(opcode, reth=reth, imm=imm, ieth=ieth, aeth=aeth)
    if padcnt is None:
        padcnt = (-len(payload)) & 3
    body = bytes(ext) + bytes(payload) + bytes(padcnt)
    pkt = (Ether(dst=mac_str(dst_mac), src=mac_str(src_mac))
           / IP(src=ip_str(src_ip), dst=ip_str(dst_ip), tos=tos, ttl=ttl, id=ip_id,
                flags="DF" if df else 0)
           / UDP(sport=sport, dport=dport, chksum=udp_chksum)
           / BTH(opcode=opcode, solicited=se, migreq=mig, padcount=padcnt, version=tver,
                 pkey=pkey, fecn=fecn, becn=becn, resv6=resv6, dqpn=dqpn, ackreq=ackreq,
                 resv7=resv7, psn=psn, icrc=icrc)
           / Raw(body))
    frame = raw(pkt)
    return frame.ljust(min_len, b"\0")


def icrc(datagram):
    """ICRC wire bytes of an IP datagram (IPv4 or IPv6 header first), ICRC itself excluded."""
    d = bytearray(datagram)
    if d[0] >> 4 == 4:
        d[1] = 0xFF                         # TOS
        d[8] = 0xFF                         # TTL
        d[10:12] = b"\xff\xff"              # header checksum
        u = 20
    else:
        d[0] |= 0x0F                        # traffic class + flow label
        d[1:4] = b"\xff\xff\xff"
        d[7] = 0xFF                         # hop limit
        u = 40
    d[u + 6:u + 8] = b"\xff\xff"[:max(0, len(d) - u - 6)]     # UDP checksum
    if len(d) > u + 8 + 4:                  # a datagram too short to hold it masks nothing
        d[u + 8 + 4] = 0xFF                 # BTH FECN/BECN/Resv6
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(d)) & 0xFFFFFFFF)


def decode_frame(frame):
    """Dict of a frame's headers (``rnic.wire`` field names), payload, pad, ICRC and its check.

    Keys: ``eth``, ``ipv4``, ``udp``, ``bth`` (dicts), ``reth``/``immdt``/``ieth``/``aeth``
    (dicts, present when the opcode carries them), ``payload``, ``pad``, ``icrc`` (bytes),
    ``icrc_ok``, ``eth_pad`` (bytes after the IPv4 datagram).
    """
    frame = bytes(frame)
    out = {"eth": wire.ETH.unpack(frame)}
    ip = out["ipv4"] = wire.IPV4.unpack(frame[14:])
    out["udp"] = wire.UDP.unpack(frame[34:])
    bth = out["bth"] = wire.BTH.unpack(frame[42:])
    end = 14 + ip["total_length"]
    row = OPCODES.get(bth["opcode"])
    pos = 54
    if row is not None:
        for name, hdr, present in (("reth", wire.RETH, row.reth), ("immdt", wire.IMMDT, row.immdt),
                                   ("ieth", wire.IETH, row.ieth), ("aeth", wire.AETH, row.aeth)):
            if present:
                out[name] = hdr.unpack(frame[pos:])
                pos += hdr.size
        pos += EXT_EXTRA[bth["opcode"]]
    pay_end = end - 4 - bth["padcnt"]
    out["payload"] = frame[pos:pay_end]
    out["pad"] = frame[pay_end:end - 4]
    out["icrc"] = frame[end - 4:end]
    out["eth_pad"] = frame[end:]
    out["icrc_ok"] = icrc(frame[14:end - 4]) == out["icrc"]
    return out


def expected_meta(frame):
    """The ``rnic.ifaces.rx_meta_layout`` dict RX Parse emits for an accepted ``frame``."""
    d = decode_frame(frame)
    b = d["bth"]
    meta = {k: b[k] for k in ("opcode", "se", "padcnt", "dqpn", "ackreq", "psn")}
    reth = d.get("reth", {})
    meta.update(
        reth_va=reth.get("va", 0), reth_rkey=reth.get("rkey", 0), reth_len=reth.get("dmalen", 0),
        imm_or_rkey=d.get("immdt", {}).get("imm", d.get("ieth", {}).get("rkey", 0)),
        aeth_syndrome=d.get("aeth", {}).get("syndrome", 0),
        src_ip=d["ipv4"]["src"], payload_len=len(d["payload"]),
    )
    return meta


def drop_reason(frame, local_mac=LOCAL_MAC, local_ip=LOCAL_IP, *, tuser=False, drop_all=False):
    """Counter RX Parse counts ``frame`` under (1–5, lowest reason wins), 0 if it is accepted.

    Header bytes a short frame does not contain read as 0 (this design's rule). Bytes after
    the IPv4 datagram (Ethernet padding, a trailer) are ignored; a frame shorter than its
    datagram or than 60 bytes counts 3.
    """
    if tuser:
        return 1
    n = len(frame)
    h = bytes(frame[:74]).ljust(74, b"\0")
    eth, ip = wire.ETH.unpack(h), wire.IPV4.unpack(h[14:])
    udp, bth = wire.UDP.unpack(h[34:]), wire.BTH.unpack(h[42:])
    if (drop_all or eth["dst"] != local_mac or eth["ethertype"] != wire.ETHERTYPE_IPV4
            or ip["dst"] != local_ip or ip["protocol"] != wire.IP_PROTO_UDP
            or udp["dport"] != wire.ROCE_UDP_PORT):
        return 2
    tot = ip["total_length"]
    csum = sum(int.from_bytes(h[14 + i:16 + i], "big") for i in range(0, 20, 2))
    while csum >> 16:
        csum = (csum & 0xFFFF) + (csum >> 16)
    if (ip["version"] != 4 or ip["ihl"] != 5 or ip["flags"] & 1 or ip["frag_offset"]
            or n > wire.MAX_FRAME or n < max(wire.MIN_FRAME, 14 + tot)
            or udp["length"] + 20 != tot or udp["length"] < 8 or csum != 0xFFFF):
        return 3
    end = 14 + tot
    if icrc(frame[14:end - 4]) != bytes(frame[end - 4:end]):
        return 4
    row = OPCODES.get(bth["opcode"])
    if (bth["tver"] != 0 or bth["pkey"] & 0x7FFF != 0x7FFF or row is None
            or udp["length"] < 12 + row.hdr_len + bth["padcnt"]):
        return 5
    return 0
