"""Wire-format tables against scapy (independent), and their hardware extract/assemble."""
import random

import pytest
from amaranth.hdl import Module, Signal
from scapy.contrib.roce import AETH as S_AETH, BTH as S_BTH
from scapy.layers.inet import IP, UDP as S_UDP
from scapy.layers.l2 import Ether

from rnic.wire import AETH, BTH, ETH, IPV4, RETH, UDP, ipv4_checksum
from sim.vsim import Simulator


def test_bth_matches_scapy():
    rng = random.Random(1)
    for _ in range(200):
        f = dict(opcode=rng.getrandbits(8), se=rng.getrandbits(1), mig=rng.getrandbits(1),
                 padcnt=rng.getrandbits(2), tver=rng.getrandbits(4), pkey=rng.getrandbits(16),
                 fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6),
                 dqpn=rng.getrandbits(24), ackreq=rng.getrandbits(1), resv7=rng.getrandbits(7),
                 psn=rng.getrandbits(24))
        s = S_BTH(opcode=f["opcode"], solicited=f["se"], migreq=f["mig"], padcount=f["padcnt"],
                  version=f["tver"], pkey=f["pkey"], fecn=f["fecn"], becn=f["becn"],
                  resv6=f["resv6"], dqpn=f["dqpn"], ackreq=f["ackreq"], resv7=f["resv7"],
                  psn=f["psn"])
        assert bytes(s)[:12] == BTH.pack(**f)
        assert BTH.unpack(bytes(s)[:12]) == f


def test_aeth_eth_ip_udp_match_scapy():
    a = S_AETH(syndrome=0x61, msn=0x123456)
    assert bytes(a) == AETH.pack(syndrome=0x61, msn=0x123456)
    e = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=0x0800)
    assert bytes(e) == ETH.pack(dst=0x020000000002, src=0x020000000001, ethertype=0x0800)
    ip = IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, id=0x1234, flags="DF", tos=2, len=52,
            proto=17)
    raw = bytes(ip)
    f = IPV4.unpack(raw)
    assert (f["version"], f["ihl"], f["tos"], f["total_length"]) == (4, 5, 2, 52)
    assert (f["flags"], f["frag_offset"], f["ttl"], f["protocol"]) == (2, 0, 64, 17)
    assert f["src"] == 0x0A000001 and f["dst"] == 0x0A000002
    zeroed = raw[:10] + b"\0\0" + raw[12:]
    assert ipv4_checksum(zeroed) == f["checksum"]
    u = S_UDP(sport=0xC123, dport=4791, len=32, chksum=0)
    assert bytes(u) == UDP.pack(sport=0xC123, dport=4791, length=32)


def test_reth_layout():
    b = RETH.pack(va=0x0102030405060708, rkey=0x11223344, dmalen=0x1000)
    assert b == bytes.fromhex("0102030405060708112233440000 1000".replace(" ", ""))


def test_hardware_extract_and_assemble():
    """Header.extract and Header.assemble agree with pack/unpack (in the generated Verilog)."""
    rng = random.Random(2)
    vals = dict(opcode=0x17, se=1, mig=0, padcnt=3, tver=0, pkey=0xFFFF, fecn=1, becn=0,
                resv6=0x2A, dqpn=0xABCDEF, ackreq=1, resv7=0x55, psn=0x123456)
    raw = BTH.pack(**vals)
    m = Module()
    inb = [Signal(8, name=f"b{i}") for i in range(12)]
    outs = {f.name: Signal(f.width, name=f"x_{f.name}") for f in BTH}
    m.d.comb += [outs[n].eq(BTH.extract(n, inb)) for n in outs]
    ins = {f.name: Signal(f.width, name=f"i_{f.name}") for f in BTH}
    built = BTH.assemble(ins)
    outb = [Signal(8, name=f"o{i}") for i in range(12)]
    m.d.comb += [o.eq(v) for o, v in zip(outb, built)]
    got = {}

    async def bench(ctx):
        for i, b in enumerate(raw):
            ctx.set(inb[i], b)
        for n, v in vals.items():
            ctx.set(ins[n], v)
        await ctx.delay(1e-9)
        got["x"] = {n: ctx.get(s) for n, s in outs.items()}
        got["b"] = bytes(ctx.get(s) for s in outb)

    sim = Simulator(m, inputs=[*inb, *ins.values()], outputs=[*outs.values(), *outb])
    sim.add_testbench(bench)
    sim.run()
    assert got["x"] == vals
    assert got["b"] == raw
