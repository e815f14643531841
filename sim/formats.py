"""The host-memory formats page (``docs/host_memory_formats.md``), generated from the driver.

There is no single definition table of the host-memory formats: the hardware reads and writes
them with bit slices in its blocks (receive WQE: ``rtl/rnic/resp/rq_fetch.py``/``execute.py``;
send WQE: ``rtl/rnic/req/requester.py``; CQE: ``rtl/rnic/host/cqe_gen.py``), and the driver
packs and unpacks them in ``sim/driver/verbs.py``. The driver is the one used against the
hardware by every end-to-end test, so this page is generated *from the driver's code*: each
encoder (``post_recv``, ``post_send``) is run with one field set to a marker and the others
zero, and the bytes that change are that field's; the CQE decoder (``Cqe.decode``) is run on a
zero entry with one byte (or bit) set, and the field that changes owns it. A format change in
the driver changes the page (``make formats-doc``; ``tb/test_formats_doc.py`` fails when it is
stale), and since the end-to-end tests pass, the hardware agrees with it.

``python -m sim.formats`` prints the page.
"""

import asyncio
import struct

__all__ = ["markdown", "recv_wqe_fields", "send_wqe_fields", "cqe_fields"]


class _Mem:
    def __init__(self):
        self.data = bytearray(1 << 16)

    def write(self, addr, data):
        self.data[addr:addr + len(data)] = data

    def read(self, addr, n):
        return bytes(self.data[addr:addr + n])


class _Regs:
    async def doorbell(self, *a):
        pass


def _qp():
    from sim.driver.verbs import Cq, Qp
    cq = Cq(0, 0, 2)
    return Qp(qpn=2, pd=1, recv_cq=cq, send_cq=cq, rq_base=0x1000, rq_log2=2,
              sq_base=0x2000, sq_log2=2)


def _bytes_of(base_kw, field, values, call):
    """Run ``call(**kw)`` with the field at 0 and at each marker; the union of changed bytes."""
    ref = call(**base_kw)
    changed = set()
    for v in values:
        try:
            out = call(**{**base_kw, field: v})
        except (struct.error, ValueError, OverflowError):
            continue
        changed |= {i for i in range(len(ref)) if ref[i] != out[i]}
    return sorted(changed)


def _ranges(idx):
    out, start, prev = [], None, None
    for i in idx:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append((start, prev))
            start = prev = i
    if start is not None:
        out.append((start, prev))
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in out)


_MARKS = [0x0102030405060708, 0x01020304, 0x0102, 0x7F, 1]


def recv_wqe_fields():
    from sim.driver.verbs import Device

    def call(wr_id=0, a0=0, l0=0, k0=0, a1=0, l1=0, k1=0, a2=0, l2=0, k2=0, n=3):
        mem = _Mem()
        dev = Device(_Regs(), mem, base=0, size=1 << 16)
        qp = _qp()
        sges = [(a0, l0, k0), (a1, l1, k1), (a2, l2, k2)][:n]
        asyncio.run(dev.post_recv(qp, wr_id, sges))
        return mem.read(qp.rq_base, 64)

    rows = [("wr_id", "wr_id", {})]
    for k in range(3):
        rows += [(f"SGE {k} addr", f"a{k}", {}), (f"SGE {k} length", f"l{k}", {}),
                 (f"SGE {k} lkey", f"k{k}", {})]
    out = [(name, _bytes_of(kw, f, _MARKS, call)) for name, f, kw in rows]
    out.insert(1, ("num_sge (0..3: its low byte; interface.md §5.1 gives the field bytes 8–11)",
                   _bytes_of({"n": 0}, "n", [1, 2, 3], call)))
    return out


def send_wqe_fields():
    from sim.driver.verbs import Device, SendOp

    def call(wr_id=0, op=SendOp.SEND, signaled=False, solicited=False, n=0, imm=b"\0\0\0\0",
             inv_rkey=0, remote_addr=0, rkey=0, a0=0, l0=0, k0=0, a1=0, l1=0, k1=0):
        mem = _Mem()
        dev = Device(_Regs(), mem, base=0, size=1 << 16)
        qp = _qp()
        sges = [(a0, l0, k0), (a1, l1, k1)][:n] if n else []
        if not n and (a0 or l0 or k0 or a1 or l1 or k1):
            sges = [(a0, l0, k0), (a1, l1, k1)]
        asyncio.run(dev.post_send(qp, wr_id, op, sges, signaled=signaled, solicited=solicited,
                                  imm=imm, inv_rkey=inv_rkey, remote_addr=remote_addr,
                                  rkey=rkey))
        return mem.read(qp.sq_base, 64)

    rows = [("wr_id", _bytes_of({}, "wr_id", _MARKS, call)),
            ("opcode (0 SEND, 1 SEND_WITH_IMM, 2 SEND_WITH_INV, 3 RDMA_WRITE, "
             "4 RDMA_WRITE_WITH_IMM)", _bytes_of({}, "op", list(SendOp)[1:], call)),
            ("flags: 0x01 signaled", _bytes_of({}, "signaled", [True], call)),
            ("flags: 0x02 solicited", _bytes_of({}, "solicited", [True], call)),
            ("num_sge", _bytes_of({}, "n", [1, 2], call)),
            ("immediate data, wire byte order (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM)",
             _bytes_of({}, "imm", [b"\x01\x02\x03\x04"], call)),
            ("rkey to invalidate, little-endian (SEND_WITH_INV)",
             _bytes_of({"op": SendOp.SEND_WITH_INV}, "inv_rkey", [0x01020304], call)),
            ("remote address (RDMA WRITE)", _bytes_of({}, "remote_addr", _MARKS, call)),
            ("rkey (RDMA WRITE)", _bytes_of({}, "rkey", _MARKS, call))]
    for k in range(2):
        for name, f in (("addr", f"a{k}"), ("length", f"l{k}"), ("lkey", f"k{k}")):
            rows.append((f"SGE {k} {name}", _bytes_of({"n": 2}, f, _MARKS, call)))
    return rows


def cqe_fields():
    from sim.driver.verbs import Cqe
    attrs = ["wr_id", "byte_len", "imm_or_rkey", "qpn", "status", "opcode", "flags", "phase"]
    ref = Cqe.decode(bytes(32))
    owners = {}
    for i in range(32):
        raw = bytearray(32)
        raw[i] = 0xFF
        got = Cqe.decode(bytes(raw))
        for a in attrs:
            if getattr(got, a) != getattr(ref, a):
                owners.setdefault(a, []).append(i)
    bit0 = bytearray(32)
    bit0[31] = 1
    phase_bit = Cqe.decode(bytes(bit0)).phase == 1
    names = {"wr_id": "wr_id", "byte_len": "byte_len (payload bytes of the message)",
             "imm_or_rkey": "immediate data (wire byte order) with WITH_IMM, or the invalidated "
                            "rkey (little-endian) with WITH_INVALIDATE",
             "qpn": "QPN [23:0]", "status": "status (IB numbering)",
             "opcode": "opcode: 0 SEND, 1 RDMA_WRITE; 128 RECV, 129 RECV_RDMA_WITH_IMM",
             "flags": "flags: 0x02 WITH_IMM, 0x04 WITH_INVALIDATE",
             "phase": "phase" + (" (bit 0)" if phase_bit else "")}
    used = set(i for v in owners.values() for i in v)
    rows = [(names[a], owners.get(a, [])) for a in attrs]
    rows.append(("reserved (ignored by the driver)", [i for i in range(32) if i not in used]))
    return rows


def _table(rows, size=None):
    if size is not None:
        used = {i for _, idx in rows for i in idx}
        free = [i for i in range(size) if i not in used]
        if free:
            rows = rows + [("always 0 from the driver (reserved, or the high bytes of a field)", free)]
    lines = ["| bytes | field |", "|---|---|"]
    for name, idx in sorted(rows, key=lambda r: (r[1][0] if r[1] else 99, r[0])):
        lines.append(f"| {_ranges(idx) or '–'} | {name} |")
    return "\n".join(lines)


def markdown():
    from sim.driver.verbs import CQE_SIZE, RECV_WQE_SIZE, SEND_WQE_SIZE
    return "\n".join([
        "# Host-memory formats",
        "",
        "Generated by `python -m sim.formats` (`make formats-doc`) from the driver's own encoders "
        "and decoder in `sim/driver/verbs.py`, by running them field by field (there is no single "
        "definition table: the hardware reads these formats with bit slices in "
        "`rtl/rnic/resp/rq_fetch.py`/`execute.py`, `rtl/rnic/req/requester.py` and "
        "`rtl/rnic/host/cqe_gen.py`; the end-to-end tests, which drive the hardware through this "
        "driver, are what keeps the two in agreement). Do not edit by hand; "
        "`tb/test_formats_doc.py` fails when it is stale. All integers little-endian; the "
        "contract is interface.md §5.",
        "",
        f"## Receive WQE, {RECV_WQE_SIZE} bytes, entry i at RQ base + {RECV_WQE_SIZE}·(i mod "
        "2^log2)",
        "",
        _table(recv_wqe_fields(), RECV_WQE_SIZE),
        "",
        f"## Send WQE, {SEND_WQE_SIZE} bytes, entry i at SQ base + {SEND_WQE_SIZE}·(i mod 2^log2)",
        "",
        _table(send_wqe_fields(), SEND_WQE_SIZE),
        "",
        f"## Completion queue entry, {CQE_SIZE} bytes, entry i at CQ base + {CQE_SIZE}·(i mod "
        "2^log2)",
        "",
        _table(cqe_fields()),
        "",
        "The phase is 1 on the first pass through the ring and flips on every wrap; software owns "
        "an entry once its phase matches its own pass. On an error CQE only wr_id, QPN, status and "
        "opcode are valid. Rings are indexed by free-running 16-bit indices given to the core "
        "through the doorbells ([registers.md](registers.md)).",
        "",
    ])


if __name__ == "__main__":
    print(markdown(), end="")
