"""The host-memory formats (interface.md §5) as one definition table.

Every format the core and the host software share in host memory — the receive WQE, the send WQE
and its scatter/gather elements, the completion queue entry — is one :class:`Format`: a list of
:class:`Field` rows, each with its byte offset and size exactly as interface.md §5 gives them. From
that one table come

* the Amaranth layouts the hardware reads and writes them through (:data:`RecvWqe`,
  :data:`SendWqe`, :data:`Sge`, :data:`Cqe`; ``data.View(SendWqe, word)`` or
  ``Signal(Cqe)``; bit ``8·i`` of a value with the layout is byte ``i`` of the entry);
* the pure-Python :meth:`Format.pack` / :meth:`Format.unpack` the driver (``sim/driver``) uses;
* the host-memory formats page of the docs (``python -m sim.formats``).

All integers are little-endian. A field may be narrower than the bytes it owns (``bits``): the QPN
of a CQE is 24 bits in bytes 16–19, the phase is bit 0 of byte 31; the rest of those bytes is
written as zero. Reserved fields (``rsvd…``) are written as zero and ignored on reading.

Two fields are not plain integers in every use: bytes 12–15 of the send WQE and of the CQE hold
the immediate data *in wire byte order* (its first wire byte at the lowest address), or an rkey as
a little-endian integer. :meth:`Format.pack` takes those bytes as given when passed ``bytes``.
"""

from typing import NamedTuple, Optional

from amaranth.hdl import unsigned
from amaranth.lib import data

__all__ = ["Field", "Format", "SGE_FORMAT", "RECV_WQE_FORMAT", "SEND_WQE_FORMAT", "CQE_FORMAT",
           "FORMATS", "Sge", "RecvWqe", "SendWqe", "Cqe",
           "SGE_BYTES", "RECV_WQE_BYTES", "SEND_WQE_BYTES", "CQE_BYTES",
           "RECV_MAX_SGE", "SEND_MAX_SGE", "SEND_SIGNALED", "SEND_SOLICITED",
           "CQE_WITH_IMM", "CQE_WITH_INVALIDATE"]


class Field(NamedTuple):
    """One row of a format table."""
    name: str
    offset: int                      # first byte, from the start of the entry
    size: int                        # bytes the field owns (for an array: of one element)
    doc: str
    bits: Optional[int] = None       # value width when narrower than 8·size (from bit 0)
    element: Optional["Format"] = None   # an array of ``count`` entries of this format
    count: int = 1

    @property
    def width(self):
        """Value width in bits of one element."""
        return self.bits if self.bits is not None else 8 * self.size

    @property
    def end(self):
        """One past the last byte of the field (all elements)."""
        return self.offset + self.size * self.count

    @property
    def reserved(self):
        return self.name.startswith("rsvd")


class Format:
    """A host-memory format: its size in bytes and its field table.

    Parameters
    ----------
    name : str
        Heading of the format (docs).
    size : int
        Size in bytes.
    fields : list of :class:`Field`
        In byte order; they may not overlap and must lie inside ``size``.
    doc : str
        One line placing the entry in memory (docs).
    """

    def __init__(self, name, size, fields, doc=""):
        self.name = name
        self.size = size
        self.fields = list(fields)
        self.doc = doc
        self.by_name = {f.name: f for f in self.fields}
        if len(self.by_name) != len(self.fields):
            raise ValueError(f"{name}: duplicate field names")
        owned = set()
        for f in self.fields:
            if f.element is not None and f.element.size != f.size:
                raise ValueError(f"{name}.{f.name}: element size {f.element.size} ≠ {f.size}")
            if not 1 <= f.width <= 8 * f.size:
                raise ValueError(f"{name}.{f.name}: {f.width} bits in {f.size} bytes")
            span = set(range(f.offset, f.end))
            if span & owned or f.offset < 0 or f.end > size:
                raise ValueError(f"{name}.{f.name}: bytes {f.offset}..{f.end - 1} overlap or "
                                 f"lie outside the {size}-byte entry")
            owned |= span
        self.layout = data.FlexibleLayout(8 * size, {
            f.name: data.Field(self._shape(f), 8 * f.offset) for f in self.fields})

    @staticmethod
    def _shape(f):
        one = f.element.layout if f.element is not None else unsigned(f.width)
        return data.ArrayLayout(one, f.count) if f.count > 1 or f.element is not None else one

    def __repr__(self):
        return f"Format({self.name!r}, {self.size})"

    # ---- pure Python ---------------------------------------------------------------------------
    def pack(self, values=None, **kw):
        """The entry as ``bytes``.

        Fields are given as a mapping and/or keywords; a missing field is 0. An integer must fit
        the field's ``bits``; ``bytes`` of exactly the field's size are stored as given (the
        immediate data, in wire byte order). An array field (the SGEs) takes a sequence of at
        most ``count`` elements, each a mapping or a tuple in the element's field order; the
        missing elements are 0.
        """
        values = {**(values or {}), **kw}
        raw = bytearray(self.size)
        for key, v in values.items():
            f = self.by_name.get(key)
            if f is None:
                raise KeyError(f"{self.name} has no field {key!r}")
            if f.element is not None:
                if len(v) > f.count:
                    raise ValueError(f"{self.name}.{key}: at most {f.count} elements, not "
                                     f"{len(v)}")
                for k, e in enumerate(v):
                    if not isinstance(e, dict):
                        names = [g.name for g in f.element.fields if not g.reserved]
                        if len(e) != len(names):
                            raise ValueError(f"{self.name}.{key}[{k}]: expected {names}")
                        e = dict(zip(names, e))
                    at = f.offset + k * f.size
                    raw[at:at + f.size] = f.element.pack(e)
            else:
                raw[f.offset:f.offset + f.size] = self._field_bytes(f, v)
        return bytes(raw)

    def _field_bytes(self, f, v):
        if isinstance(v, (bytes, bytearray)):
            if len(v) != f.size or f.width != 8 * f.size:
                raise ValueError(f"{self.name}.{f.name}: {len(v)} bytes for a {f.width}-bit "
                                 f"field")
            return bytes(v)
        v = int(v)
        if not 0 <= v < 1 << f.width:
            raise ValueError(f"{self.name}.{f.name}: {v:#x} does not fit {f.width} bits")
        return v.to_bytes(f.size, "little")

    def unpack(self, raw):
        """The fields of an entry as a dict of integers (arrays: a list of dicts); reserved
        fields left out, bits above a field's width ignored."""
        raw = bytes(raw)
        if len(raw) < self.size:
            raise ValueError(f"{self.name}: {len(raw)} bytes, not {self.size}")
        out = {}
        for f in self.fields:
            if f.reserved:
                continue
            if f.element is not None:
                out[f.name] = [f.element.unpack(raw[f.offset + k * f.size:][:f.size])
                               for k in range(f.count)]
            else:
                v = int.from_bytes(raw[f.offset:f.offset + f.size], "little")
                out[f.name] = v & ((1 << f.width) - 1)
        return out

    def rows(self):
        """Every field flattened, arrays expanded: ``(name, first byte, last byte, bits, doc)``
        in byte order; ``bits`` is None when the field fills its bytes. Names of array elements
        are ``sge[k].addr``, their doc ``SGE k address``."""
        out = []
        for f in self.fields:
            if f.element is None:
                out.append((f.name, f.offset, f.end - 1, f.bits, f.doc))
                continue
            for k in range(f.count):
                for name, a, b, bits, doc in f.element.rows():
                    at = f.offset + k * f.size
                    out.append((f"{f.name}[{k}].{name}", at + a, at + b, bits,
                                f"{f.doc} {k} {doc}"))
        return out


# ---- the tables (interface.md §5) ---------------------------------------------------------------

SGE_BYTES = 16
RECV_WQE_BYTES = 64
SEND_WQE_BYTES = 64
CQE_BYTES = 32
RECV_MAX_SGE = 3
SEND_MAX_SGE = 2

#: send WQE ``flags``
SEND_SIGNALED = 0x01
SEND_SOLICITED = 0x02
#: CQE ``flags``
CQE_WITH_IMM = 0x02
CQE_WITH_INVALIDATE = 0x04

SGE_FORMAT = Format("Scatter/gather element", SGE_BYTES, [
    Field("addr", 0, 8, "address"),
    Field("length", 8, 4, "length in bytes"),
    Field("lkey", 12, 4, "lkey"),
], "in a receive WQE (three) and a send WQE (two)")

RECV_WQE_FORMAT = Format("Receive WQE", RECV_WQE_BYTES, [
    Field("wr_id", 0, 8, "wr_id"),
    Field("num_sge", 8, 4, f"num_sge (0..{RECV_MAX_SGE})"),
    Field("rsvd", 12, 4, "reserved"),
    Field("sge", 16, SGE_BYTES, "SGE", element=SGE_FORMAT, count=RECV_MAX_SGE),
], "entry i at RQ base + 64·(i mod 2^log2)")

SEND_WQE_FORMAT = Format("Send WQE", SEND_WQE_BYTES, [
    Field("wr_id", 0, 8, "wr_id"),
    Field("opcode", 8, 1, "opcode: 0 SEND, 1 SEND_WITH_IMM, 2 SEND_WITH_INV, 3 RDMA_WRITE, "
                          "4 RDMA_WRITE_WITH_IMM, 5 RDMA_READ"),
    Field("flags", 9, 1, "flags: 0x01 signaled, 0x02 solicited"),
    Field("num_sge", 10, 1, f"num_sge (0..{SEND_MAX_SGE})"),
    Field("rsvd0", 11, 1, "reserved"),
    Field("imm_or_inv_rkey", 12, 4, "immediate data, stored in wire byte order (WITH_IMM); or "
                                    "the rkey to invalidate, little-endian (SEND_WITH_INV)"),
    Field("remote_addr", 16, 8, "remote address (RDMA WRITE, RDMA READ)"),
    Field("rkey", 24, 4, "rkey (RDMA WRITE, RDMA READ)"),
    Field("rsvd1", 28, 4, "reserved"),
    Field("sge", 32, SGE_BYTES, "SGE", element=SGE_FORMAT, count=SEND_MAX_SGE),
], "entry i at SQ base + 64·(i mod 2^log2)")

CQE_FORMAT = Format("Completion queue entry", CQE_BYTES, [
    Field("wr_id", 0, 8, "wr_id"),
    Field("byte_len", 8, 4, "byte_len (payload bytes of the message; immediate and IETH "
                            "excluded)"),
    Field("imm_or_rkey", 12, 4, "immediate data in wire byte order (with WITH_IMM), or the "
                                "invalidated rkey, little-endian (with WITH_INVALIDATE)"),
    Field("qpn", 16, 4, "QPN [23:0]", bits=24),
    Field("status", 20, 1, "status (IB numbering: 0 SUCCESS, 2 LOC_QP_OP_ERR, 4 LOC_PROT_ERR, "
                           "5 WR_FLUSH_ERR, 9 REM_INV_REQ_ERR, 10 REM_ACCESS_ERR, 11 REM_OP_ERR, "
                           "12 RETRY_EXC_ERR, 13 RNR_RETRY_EXC_ERR)"),
    Field("opcode", 21, 1, "opcode: 0 SEND, 1 RDMA_WRITE, 2 RDMA_READ (send side); 128 RECV, "
                           "129 RECV_RDMA_WITH_IMM (receive side); set on every CQE"),
    Field("flags", 22, 1, "flags: 0x02 WITH_IMM, 0x04 WITH_INVALIDATE"),
    Field("rsvd", 23, 8, "reserved"),
    Field("phase", 31, 1, "phase: 1 on the first pass through the ring, flipped on every wrap",
          bits=1),
], "entry i at CQ base + 32·(i mod 2^log2)")

FORMATS = [RECV_WQE_FORMAT, SEND_WQE_FORMAT, SGE_FORMAT, CQE_FORMAT]

#: Amaranth layouts of the formats (bit 8·i = byte i of the entry).
Sge = SGE_FORMAT.layout
RecvWqe = RECV_WQE_FORMAT.layout
SendWqe = SEND_WQE_FORMAT.layout
Cqe = CQE_FORMAT.layout
