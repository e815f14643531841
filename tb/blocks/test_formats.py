"""rnic.formats, the one definition of the host-memory formats, against interface.md §5.

The expectations are the contract's own tables, copied verbatim below and parsed here; they do not
come from the module under test. ``RNIC_INTERFACE_MD=<path to interface.md>`` additionally checks
that the copy still matches the contract's text (by default the shared ``spec/interface.md``
beside the checkout, when there is one). Pure Python, no simulation.
"""
import os
import random
import re

import pytest

from rnic.formats import (CQE_FORMAT, CQE_WITH_IMM, CQE_WITH_INVALIDATE, RECV_WQE_FORMAT,
                          SEND_SIGNALED, SEND_SOLICITED, SEND_WQE_FORMAT, Cqe, RecvWqe, SendWqe,
                          Sge)
from sim.knobs import knob
from sim.runner import ROOT

# interface.md §5, verbatim
SPEC_RECV = """\
### 5.1 Receive WQE, 64 bytes, ring entry i at RQ base + 64·(i mod 2^log2)
| bytes | field |
|---|---|
| 0–7 | wr_id |
| 8–11 | num_sge (0..3) |
| 12–15 | reserved |
| 16+16·k | SGE k: addr (8), length (4), lkey (4) |
"""

SPEC_SEND = """\
### 5.2 Send WQE, 64 bytes
| bytes | field |
|---|---|
| 0–7 | wr_id |
| 8 | opcode: 0 SEND, 1 SEND_WITH_IMM, 2 SEND_WITH_INV, 3 RDMA_WRITE, 4 RDMA_WRITE_WITH_IMM, 5 \
RDMA_READ (version 2) |
| 9 | flags: 0x01 signaled, 0x02 solicited |
| 10 | num_sge (0..2) |
| 11 | reserved |
| 12–15 | immediate data, stored in wire byte order; or the rkey to invalidate (little-endian) |
| 16–23 | remote address (RDMA WRITE, RDMA READ) |
| 24–27 | rkey (RDMA WRITE, RDMA READ) |
| 28–31 | reserved |
| 32–47, 48–63 | SGE 0, SGE 1 as in 5.1 |
"""

SPEC_CQE = """\
### 5.4 Completion queue entry, 32 bytes, entry i at CQ base + 32·(i mod 2^log2)
| bytes | field |
|---|---|
| 0–7 | wr_id |
| 8–11 | byte_len (payload bytes of the message; immediate and IETH excluded) |
| 12–15 | immediate data in wire byte order (with WITH_IMM), or the invalidated rkey, \
little-endian (with WITH_INVALIDATE) |
| 16–19 | QPN [23:0] |
| 20 | status (IB numbering: 0 SUCCESS, 2 LOC_QP_OP_ERR, 4 LOC_PROT_ERR, 5 WR_FLUSH_ERR, 9 \
REM_INV_REQ_ERR, 10 REM_ACCESS_ERR, 11 REM_OP_ERR, 12 RETRY_EXC_ERR, 13 RNR_RETRY_EXC_ERR) |
| 21 | opcode: 0 SEND, 1 RDMA_WRITE, 2 RDMA_READ (send side); 128 RECV, 129 RECV_RDMA_WITH_IMM \
(receive side) — set on every CQE, errors included |
| 22 | flags: 0x02 WITH_IMM, 0x04 WITH_INVALIDATE |
| 23–30 | reserved |
| 31 | bit 0: phase. It is 1 on the first pass through the ring and flips on every wrap; software \
owns the entry once the phase matches its own pass. The whole entry is written in one burst, after \
OKAY write responses for all the data it reports. |
"""

# the spec's words for a field -> the table's field name (the first word of the spec's text)
NAMES = {"wr_id": "wr_id", "num_sge": "num_sge", "opcode:": "opcode", "flags:": "flags",
         "immediate": None, "remote": "remote_addr", "rkey": "rkey", "byte_len": "byte_len",
         "QPN": "qpn", "status": "status", "bit": "phase"}
SGE_SUB = re.compile(r"(\w+) \((\d+)\)")


def _spec_fields(text, imm_name):
    """``{name: (first byte, last byte, value bits or None)}`` from a §5 table, SGEs expanded;
    reserved rows named rsvd, rsvd0, rsvd1... in order when there are several."""
    size = int(re.search(r", (\d+) bytes", text).group(1))
    rows = [line.split(" | ", 1) for line in text.splitlines() if re.match(r"\| [0-9]", line)]
    out, rsvd, sges = {}, [], None
    for where, what in rows:
        where, what = where.strip("| "), what.rstrip(" |")
        if what.startswith("SGE k:"):                     # 5.1: 16+16·k, k = 0.. to the end
            base, step = map(int, re.match(r"(\d+)\+(\d+)·k", where).groups())
            sub = [(n, int(w)) for n, w in SGE_SUB.findall(what)]
            sges = [base + step * k for k in range((size - base) // step)]
            continue
        if what.startswith("SGE 0"):                      # 5.2: as in 5.1
            sges = [int(r.split("–")[0]) for r in where.split(", ")]
            sub = [("addr", 8), ("length", 4), ("lkey", 4)]
            continue
        a, _, b = where.partition("–")
        a, b = int(a), int(b or a)
        word = what.split()[0]
        if word == "reserved":
            rsvd.append((a, b))
            continue
        name = imm_name if word == "immediate" else NAMES[word]
        bits = None
        if m := re.search(r"\[(\d+):0\]", what):
            bits = int(m.group(1)) + 1
        if what.startswith("bit 0:"):
            bits = 1
        out[name] = (a, b, bits)
    for i, (a, b) in enumerate(rsvd):
        out["rsvd" if len(rsvd) == 1 else f"rsvd{i}"] = (a, b, None)
    for k, at in enumerate(sges or []):
        for n, w in sub:
            out[f"sge[{k}].{n}"] = (at, at + w - 1, None)
            at += w
    return size, out


CASES = [(SPEC_RECV, RECV_WQE_FORMAT, None), (SPEC_SEND, SEND_WQE_FORMAT, "imm_or_inv_rkey"),
         (SPEC_CQE, CQE_FORMAT, "imm_or_rkey")]


@pytest.mark.parametrize("spec,fmt,imm", CASES, ids=["recv_wqe", "send_wqe", "cqe"])
def test_table_is_the_contract(spec, fmt, imm):
    size, want = _spec_fields(spec, imm)
    got = {name: (a, b, bits) for name, a, b, bits, _ in fmt.rows()}
    assert fmt.size == size
    assert got == want
    # every byte of the entry is some field's (reserved included), none twice
    owned = sorted(i for a, b, _ in want.values() for i in range(a, b + 1))
    assert owned == list(range(size))


def test_flag_values_are_the_contract():
    assert f"{SEND_SIGNALED:#04x} signaled, {SEND_SOLICITED:#04x} solicited" in SPEC_SEND
    assert f"{CQE_WITH_IMM:#04x} WITH_IMM, {CQE_WITH_INVALIDATE:#04x} WITH_INVALIDATE" in SPEC_CQE


def _contract_path():
    """interface.md: ``$RNIC_INTERFACE_MD``, else the shared spec beside the checkout."""
    path = knob("RNIC_INTERFACE_MD")
    if path:
        return path
    shared = os.path.join(ROOT, "..", "shared", "spec", "interface.md")
    return shared if os.path.exists(shared) else None


def test_spec_copy_is_current():
    path = _contract_path()
    if not path:
        pytest.skip("no interface.md beside the checkout: set RNIC_INTERFACE_MD to compare")
    text = open(path, encoding="utf-8").read()
    assert "**Version 2**" in text
    for spec in (SPEC_RECV, SPEC_SEND, SPEC_CQE):
        assert spec in text


def _random_values(fmt, rnd):
    vals = {}
    for f in fmt.fields:
        if f.reserved:
            continue
        if f.element is not None:
            vals[f.name] = [_random_values(f.element, rnd) for _ in range(f.count)]
        else:
            vals[f.name] = rnd.getrandbits(f.width)
    return vals


@pytest.mark.parametrize("fmt,layout", [(RECV_WQE_FORMAT, RecvWqe), (SEND_WQE_FORMAT, SendWqe),
                                        (CQE_FORMAT, Cqe)], ids=["recv_wqe", "send_wqe", "cqe"])
def test_layout_and_pack_agree(fmt, layout):
    """The hardware's layout and the driver's pack/unpack place every field on the same bits."""
    rnd = random.Random(12)
    assert layout.size == 8 * fmt.size
    for _ in range(20):
        vals = _random_values(fmt, rnd)
        raw = fmt.pack(vals)
        assert layout.const(vals).as_value().value == int.from_bytes(raw, "little")
        assert fmt.unpack(raw) == vals
    # one field at a time lands on its own bytes only
    for name, a, b, bits, _ in fmt.rows():
        if name.startswith("rsvd"):
            continue
        top, _, sub = name.partition(".")
        ones = (1 << (bits or 8 * (b - a + 1))) - 1      # the field full of ones
        if sub:
            k = int(top[top.index("[") + 1:-1])
            vals = {top[:top.index("[")]: [{}] * k + [{sub: ones}]}
        else:
            vals = {top: ones}
        raw = fmt.pack(vals)
        width = bits or 8 * (b - a + 1)
        assert [i for i in range(fmt.size) if raw[i]] == list(range(a, a + (width + 7) // 8)), name
        assert int.from_bytes(raw, "little") >> (8 * a) == ones, name


def test_pack_refuses():
    with pytest.raises(ValueError):
        CQE_FORMAT.pack(qpn=1 << 24)
    with pytest.raises(ValueError):
        CQE_FORMAT.pack(phase=2)
    with pytest.raises(ValueError):
        SEND_WQE_FORMAT.pack(sge=[(0, 0, 0)] * 3)
    with pytest.raises(KeyError):
        RECV_WQE_FORMAT.pack(opcode=1)
    # the immediate's bytes are stored as given (wire byte order)
    raw = SEND_WQE_FORMAT.pack(imm_or_inv_rkey=b"\x01\x02\x03\x04")
    assert raw[12:16] == b"\x01\x02\x03\x04"
    assert CQE_FORMAT.unpack(bytes(31) + b"\xff")["phase"] == 1


def test_responder_receive_wqe_layout_is_the_table():
    """Receive Queue fetch and Execute read the receive WQE through ``rq_fetch.wqe_layout``."""
    from rnic.resp.rq_fetch import sge_layout, wqe_layout
    assert wqe_layout == RecvWqe and sge_layout == Sge
