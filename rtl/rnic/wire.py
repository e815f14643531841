"""Wire-format tables: one table per header, shared by the hardware and by Python.

Every header is a :class:`Header` made of :class:`Field` rows (name, byte offset, bit position,
width). Fields are big-endian as on the wire: ``bit`` counts from the most significant bit of
the byte at ``offset`` (0 = MSB), so the BTH ``PadCnt`` field is ``Field("padcnt", 1, 2, 2)``.

The same table drives:

* the hardware parser (:func:`Header.extract`, applied to a list of 8-bit byte values),
* the hardware builder (:func:`Header.assemble`, producing the list of byte values),
* the Python packet code in ``sim/`` (:func:`Header.pack` / :func:`Header.unpack`),

so the parser, the builder and the tests can never disagree about where a field lives.
"""

from typing import NamedTuple

__all__ = [
    "Field", "Header",
    "ETH", "IPV4", "UDP", "BTH", "RETH", "AETH", "IMMDT", "IETH",
    "ETHERTYPE_IPV4", "IP_PROTO_UDP", "ROCE_UDP_PORT",
    "ETH_LEN", "IPV4_LEN", "UDP_LEN", "BTH_LEN", "ICRC_LEN", "MIN_FRAME", "MAX_FRAME",
    "ipv4_checksum",
]


class Field(NamedTuple):
    """One header field.

    Attributes
    ----------
    name : str
    offset : int
        Byte offset of the field's first (most significant) byte within the header.
    bit : int
        Position of the field's most significant bit within that byte, 0 = the byte's MSB.
    width : int
        Width in bits.
    """
    name: str
    offset: int
    bit: int
    width: int

    @property
    def first_bit(self):
        """Wire bit index of the field's MSB from the start of the header (MSB-first)."""
        return self.offset * 8 + self.bit

    @property
    def nbytes(self):
        """Number of header bytes the field touches."""
        return (self.bit + self.width + 7) // 8

    @property
    def mask(self):
        return (1 << self.width) - 1


class Header:
    """A fixed-size header: its name, size in bytes and fields."""

    def __init__(self, name, size, fields):
        self.name = name
        self.size = size
        self.fields = {}
        for f in fields:
            f = Field(*f)
            if f.first_bit + f.width > size * 8:
                raise ValueError(f"{name}.{f.name} runs past the {size}-byte header")
            self.fields[f.name] = f

    def __getitem__(self, name):
        return self.fields[name]

    def __iter__(self):
        return iter(self.fields.values())

    def __repr__(self):
        return f"Header({self.name!r}, {self.size})"

    # ---- Python side -------------------------------------------------------------------------
    def pack(self, **values):
        """Bytes of the header with the given field values (missing fields are 0)."""
        word = 0
        for name, value in values.items():
            f = self.fields[name]
            if not 0 <= value <= f.mask:
                raise ValueError(f"{self.name}.{name}={value:#x} does not fit {f.width} bits")
            word |= value << (self.size * 8 - f.first_bit - f.width)
        return word.to_bytes(self.size, "big")

    def unpack(self, data):
        """Dict of every field's value from the first ``size`` bytes of ``data``."""
        if len(data) < self.size:
            raise ValueError(f"{self.name} needs {self.size} bytes, got {len(data)}")
        word = int.from_bytes(bytes(data[:self.size]), "big")
        return {f.name: (word >> (self.size * 8 - f.first_bit - f.width)) & f.mask
                for f in self}

    # ---- hardware side -----------------------------------------------------------------------
    def extract(self, name, header_bytes):
        """Amaranth value of field ``name`` from ``header_bytes``.

        ``header_bytes[i]`` is an 8-bit value holding header byte ``i`` (wire order); it may be a
        list of Values or anything indexable. Big-endian assembly is explicit here, once.
        """
        from amaranth.hdl import Cat
        f = self.fields[name]
        span = [header_bytes[f.offset + i] for i in range(f.nbytes)]
        # Cat is LSB first: the last wire byte is the least significant.
        word = Cat(*reversed(span))
        low = f.nbytes * 8 - f.bit - f.width
        return word[low:low + f.width]

    def assemble(self, values):
        """List of ``size`` 8-bit Amaranth values with the fields set from ``values``.

        ``values`` maps field names to Amaranth values (or ints); absent fields are 0.
        """
        from amaranth.hdl import Cat, Const, Value
        bits = [Const(0, 1)] * (self.size * 8)        # MSB-first wire bit order
        for name, v in values.items():
            f = self.fields[name]
            v = Value.cast(v)
            for i in range(f.width):
                b = f.width - 1 - i         # value bit for wire bit i (zero-extend narrow values)
                bits[f.first_bit + i] = v[b] if b < len(v) else Const(0, 1)
        return [Cat(*reversed(bits[8 * b:8 * b + 8])) for b in range(self.size)]


ETH = Header("eth", 14, [
    ("dst", 0, 0, 48),
    ("src", 6, 0, 48),
    ("ethertype", 12, 0, 16),
])

IPV4 = Header("ipv4", 20, [
    ("version", 0, 0, 4),
    ("ihl", 0, 4, 4),
    ("tos", 1, 0, 8),
    ("total_length", 2, 0, 16),
    ("id", 4, 0, 16),
    ("flags", 6, 0, 3),            # reserved, DF, MF
    ("frag_offset", 6, 3, 13),
    ("ttl", 8, 0, 8),
    ("protocol", 9, 0, 8),
    ("checksum", 10, 0, 16),
    ("src", 12, 0, 32),
    ("dst", 16, 0, 32),
])

UDP = Header("udp", 8, [
    ("sport", 0, 0, 16),
    ("dport", 2, 0, 16),
    ("length", 4, 0, 16),
    ("checksum", 6, 0, 16),
])

BTH = Header("bth", 12, [
    ("opcode", 0, 0, 8),
    ("se", 1, 0, 1),
    ("mig", 1, 1, 1),
    ("padcnt", 1, 2, 2),
    ("tver", 1, 4, 4),
    ("pkey", 2, 0, 16),
    ("fecn", 4, 0, 1),
    ("becn", 4, 1, 1),
    ("resv6", 4, 2, 6),
    ("dqpn", 5, 0, 24),
    ("ackreq", 8, 0, 1),
    ("resv7", 8, 1, 7),
    ("psn", 9, 0, 24),
])

RETH = Header("reth", 16, [
    ("va", 0, 0, 64),
    ("rkey", 8, 0, 32),
    ("dmalen", 12, 0, 32),
])

AETH = Header("aeth", 4, [
    ("syndrome", 0, 0, 8),
    ("msn", 1, 0, 24),
])

IMMDT = Header("immdt", 4, [
    ("imm", 0, 0, 32),
])

IETH = Header("ieth", 4, [
    ("rkey", 0, 0, 32),
])

ETHERTYPE_IPV4 = 0x0800
IP_PROTO_UDP = 17
ROCE_UDP_PORT = 4791

ETH_LEN = ETH.size
IPV4_LEN = IPV4.size
UDP_LEN = UDP.size
BTH_LEN = BTH.size
ICRC_LEN = 4
MIN_FRAME = 60          # without FCS
MAX_FRAME = 4200        # longest frame accepted (interface.md §4.5 counter 3)


def ipv4_checksum(header):
    """Internet checksum of a 20-byte IPv4 header whose checksum field is zero."""
    s = sum(int.from_bytes(header[i:i + 2], "big") for i in range(0, len(header), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
