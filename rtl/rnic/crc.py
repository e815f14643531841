"""CRC-32 (IEEE 802.3, reflected, as ``zlib.crc32``) over a W-bit byte stream, one beat a cycle.

The ICRC checker of RX Parse and the ICRC generator of the TX frame builder are both this unit.

How it stays at one beat per cycle with any ``keep``
----------------------------------------------------
CRC-32 is linear over GF(2): after one W-bit beat, ``s' = A·s ⊕ G·d`` where ``A`` advances the
state by W/8 bytes and ``G`` is the data term. Every beat, full or partial, goes through that
single full-width update with its invalid bytes forced to zero. Trailing zero bytes only advance
the state (``A^k``), and ``A`` is invertible, so a last beat with ``k`` missing bytes is
corrected afterwards by ``A^-k``, applied on the 32-bit state alone in stages of two bits of
``k`` each (a choice of four 32×32 maps), ``⌈(log2(W/8)+1)/2⌉`` of them (fewer when the source
promises the packet's length modulo 4,
``end_mod4``: the ICRC's input always ends 2 bytes past a multiple of 4, after the 14-byte
Ethernet header and a payload padded to 4 bytes). The wide data term is computed ahead of the
feedback loop (per 64-bit chunk, XORed in a stage of its own above two chunks), so only a 32×32
matrix and the XOR of at most two terms stay inside the loop.

A checker needs no correction: run over a packet that ends with its own CRC, the register holds a
constant residue ``R`` exactly when the packet is intact, and ``A^k·R`` after ``k`` trailing zero
bytes, so with ``residue=`` the unit compares the uncorrected state with the one of ``W/8 + 1``
constants that ``k`` selects, and answers one bit.

The initial state is a parameter: with ``init=crc_init_skipping(n, prefix)`` a stream may start
with ``n`` bytes forced to zero and behave as though it had begun with ``prefix`` (this is how
RX Parse replaces the 14-byte Ethernet header by the ICRC's eight 0xFF bytes of masked LRH).
"""

import zlib

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .stream import check_width

__all__ = ["CRC32", "crc32_update", "crc_init_skipping", "crc_init_before", "crc_fixed_word",
           "CRC_INIT", "CRC_POLY"]

CRC_POLY = 0xEDB88320   # reflected 0x04C11DB7
CRC_INIT = 0xFFFFFFFF
CRC_XOROUT = 0xFFFFFFFF


def crc32_update(state, data_bytes):
    """Raw register update (no final XOR): ``zlib.crc32(m) == crc32_update(INIT, m) ^ XOROUT``."""
    for b in data_bytes:
        state ^= b
        for _ in range(8):
            state = (state >> 1) ^ (CRC_POLY if state & 1 else 0)
    return state


# ---- GF(2) linear maps as 32 row masks ---------------------------------------------------------

def _rows_from_function(fn, n_in):
    cols = [fn(1 << j) for j in range(n_in)]
    return [sum(((cols[j] >> i) & 1) << j for j in range(n_in)) for i in range(32)]


def _apply(rows, x):
    return sum((bin(r & x).count("1") & 1) << i for i, r in enumerate(rows))


def _mat_mul(a, b):
    """Rows of a∘b (apply b first)."""
    return _rows_from_function(lambda x: _apply(a, _apply(b, x)), 32)


def _mat_inv(rows):
    # Gauss-Jordan over GF(2) on [M | I].
    aug = [(rows[i], 1 << i) for i in range(32)]
    for col in range(32):
        piv = next(r for r in range(col, 32) if (aug[r][0] >> col) & 1)
        aug[col], aug[piv] = aug[piv], aug[col]
        for r in range(32):
            if r != col and (aug[r][0] >> col) & 1:
                aug[r] = (aug[r][0] ^ aug[col][0], aug[r][1] ^ aug[col][1])
    return [aug[i][1] for i in range(32)]


def _advance_rows(nbytes):
    """A^n: the state after n zero bytes, as rows over the 32 state bits."""
    return _rows_from_function(lambda s: crc32_update(s, bytes(nbytes)), 32)


def _data_rows(nbytes):
    """G: the data term of an n-byte message (zero initial state), rows over 8n data bits."""
    return _rows_from_function(
        lambda d: crc32_update(0, d.to_bytes(nbytes, "little")), 8 * nbytes)


def crc_init_skipping(nbytes, prefix=b""):
    """Initial register value such that ``nbytes`` zero bytes leave the state that ``prefix``
    leaves when started from the usual init."""
    target = crc32_update(CRC_INIT, prefix)
    return _apply(_mat_inv(_advance_rows(nbytes)), target)


def crc_init_before(prefix, target):
    """Initial register value such that the bytes ``prefix`` leave the register at ``target``."""
    return _apply(_mat_inv(_advance_rows(len(prefix))), target ^ crc32_update(0, prefix))


def crc_fixed_word(state):
    """The 4 bytes that leave the register at ``state`` (``crc32_update(state, y) == state``):
    any number of copies of them may precede a stream that starts at ``state``."""
    y = _apply(_mat_inv(_data_rows(4)), state ^ _apply(_advance_rows(4), state))
    return y.to_bytes(4, "little")


def _xor_rows(rows, vec):
    bits = []
    for r in rows:
        taps = [vec[j] for j in range(len(vec)) if (r >> j) & 1]
        bits.append(Cat(*taps).xor() if taps else Const(0, 1))
    return Cat(*bits)


class CRC32(wiring.Component):
    """CRC-32 of a byte stream, W bits per cycle, any contiguous ``keep``.

    The unit never stalls its input (``i.ready`` is always 1) and delivers one result per packet
    ``latency`` cycles after the packet's last beat.

    Parameters
    ----------
    width : int
        Data width W: 64, 128, 256 or 512.
    init : int
        Initial register value (default ``0xFFFFFFFF``, giving ``zlib.crc32``).
    premasked : bool
        The source zeroes the bytes outside ``keep`` itself (default False: the unit masks
        them, one level of logic before its data term).
    residue : int or None
        A checker: ``o.payload`` is one bit, 1 when ``zlib.crc32`` of the packet equals
        ``residue`` (``0x2144DF1C`` for a packet that ends with its own CRC-32, little-endian).
        No correction stages.
    end_mod4 : int or None
        Every packet's length in bytes is ``end_mod4`` modulo 4 (a promise of the source: the
        last beat's ``keep`` takes only the values that allow), so the correction of k's two low
        bits is one constant map, applied with the first of the others: the bits of k from 2
        up that may be set, two to a correction stage (``⌈(log2(W/8) − 2)/2⌉`` stages with a
        non-zero ``end_mod4``: 1, 1, 2, 2 at W = 64 … 512).
    fold : bool
        The data term is computed in the feedback stage, not in a stage of its own (W ≤ 128:
        one LUT level more in that stage, one cycle less of latency; default False).
    whole : bool
        Every beat is whole (``keep`` all ones, the last beat's too: the source aligns each
        packet's end on a beat, see ``crc_init_before``): no correction stages (default False).
    latency : int or None
        Of a checker only: a latency longer than its least (its first extra cycle registers the
        residue compare's two 16-bit halves, the others delay the result); a generator's
        latency is its least. Default: the least.

    Attributes
    ----------
    i : In(stream.Signature(layout, always_ready=True))
        ``data`` (W), ``keep`` (W/8, contiguous from bit 0, any value including 0 on the last
        beat; all ones otherwise), ``first`` (first beat of a packet: restarts from ``init``),
        ``last`` (last beat of a packet).
    o : Out(stream.Signature(32 or 1, always_ready=True))
        ``payload`` is ``zlib.crc32`` of the packet (final XOR applied): its wire bytes are
        ``payload.to_bytes(4, "little")``; with ``residue``, whether it equals ``residue``.
        Valid for one cycle per packet.
    latency : int
        Cycles from the last beat accepted to ``o.valid``: 2 (one stage for the data term, one
        for the feedback; one less with ``fold``), one more above W = 128 (the data term's
        chunks XORed), plus the correction stages of a generator (none with ``whole``).
    """

    def __init__(self, width, *, init=CRC_INIT, premasked=False, residue=None, end_mod4=None,
                 whole=False, fold=False, latency=None):
        self.width = check_width(width)
        self.init = init
        self.premasked = premasked
        if residue is not None and not (isinstance(residue, int) and 0 <= residue < 1 << 32):
            raise ValueError(f"residue must be a 32-bit value, not {residue!r}")
        self.residue = residue
        if end_mod4 not in (None, 0, 1, 2, 3):
            raise ValueError(f"end_mod4 must be None or 0..3, not {end_mod4!r}")
        self.end_mod4 = end_mod4
        self.nbytes = width // 8
        self.kbits = self.nbytes.bit_length()          # k in 0 .. W/8
        self.chunks = max(1, width // 64)
        # the data term's chunks are XORed in a stage of their own above two chunks, inside
        # the feedback stage otherwise
        self.xor_stage = self.chunks > 2
        if fold and self.xor_stage:
            raise ValueError("fold needs a width of at most 128")
        self.fold = fold
        # correction: the bits of k that may be set, two to a stage; with ``end_mod4`` k's two
        # low bits are a constant, applied with the first stage of the others
        if end_mod4 is None:
            self.fixed, self.kstages = 0, list(range(self.kbits))
        else:
            self.fixed = -end_mod4 % 4
            k_max = self.nbytes if end_mod4 == 0 else self.nbytes - end_mod4
            self.kstages = list(range(2, k_max.bit_length()))
        self.kgroups = ([] if whole else
                        [self.kstages[i:i + 2] for i in range(0, len(self.kstages), 2)])
        least = 2 - fold + self.xor_stage + (len(self.kgroups) if residue is None else 0)
        if latency is None:
            latency = least
        if not isinstance(latency, int) or latency < least or residue is None and latency != least:
            raise ValueError(f"latency must be {least} for this unit"
                             f"{' or more' if residue is not None else ''}, not {latency!r}")
        self.latency = latency
        layout = data.StructLayout({"data": width, "keep": width // 8, "first": 1, "last": 1})
        super().__init__({
            "i": In(stream.Signature(layout, always_ready=True)),
            "o": Out(stream.Signature(32 if residue is None else 1, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        W, nb = self.width, self.nbytes

        s1 = m.d.comb if self.fold else m.d.sync    # stage 1: mask, per-chunk data terms
        masked = Signal(W)      # a signal, so each XOR tap below is one wire, not a new mux
        if self.premasked:
            m.d.comb += masked.eq(self.i.payload.data)
        else:
            m.d.comb += masked.eq(Cat(*[Mux(self.i.payload.keep[b],
                                            self.i.payload.data[8 * b:8 * b + 8], 0)
                                        for b in range(nb)]))
        missing = Signal(self.kbits)
        m.d.comb += missing.eq(nb - sum(self.i.payload.keep[b] for b in range(nb)))
        g_rows = _data_rows(nb)
        cw = W // self.chunks
        s1_terms = [Signal(32, name=f"s1_term{c}") for c in range(self.chunks)]
        s1_valid, s1_first, s1_last = Signal(), Signal(), Signal()
        s1_missing = Signal(self.kbits)
        for c, term in enumerate(s1_terms):
            rows = [(r >> (c * cw)) & ((1 << cw) - 1) for r in g_rows]
            s1 += term.eq(_xor_rows(rows, masked[c * cw:(c + 1) * cw]))
        s1 += [
            s1_valid.eq(self.i.valid),
            s1_first.eq(self.i.payload.first),
            s1_last.eq(self.i.payload.last),
            s1_missing.eq(missing),
        ]

        # Stage 2 (above two chunks): combine chunk terms.
        if self.xor_stage:
            s2_term = Signal(32)
            s2_valid, s2_first, s2_last = Signal(), Signal(), Signal()
            s2_missing = Signal(self.kbits)
            acc = s1_terms[0]
            for t in s1_terms[1:]:
                acc = acc ^ t
            m.d.sync += [
                s2_term.eq(acc), s2_valid.eq(s1_valid), s2_first.eq(s1_first),
                s2_last.eq(s1_last), s2_missing.eq(s1_missing),
            ]
            terms = [s2_term]
        else:
            terms = s1_terms
            s2_valid, s2_first, s2_last, s2_missing = s1_valid, s1_first, s1_last, s1_missing

        # Stage 3: the feedback loop (32x32 matrix and the XOR of the terms).
        a_rows = _advance_rows(nb)
        state = Signal(32, init=self.init)
        adv_init = _apply(a_rows, self.init)
        nxt = Mux(s2_first, Const(adv_init, 32), _xor_rows(a_rows, state))
        for t in terms:
            nxt = nxt ^ t
        tail_valid = Signal()
        tail = Signal(32)
        tail_missing = Signal(self.kbits)
        with m.If(s2_valid):
            m.d.sync += state.eq(nxt)
        m.d.sync += [tail_valid.eq(s2_valid & s2_last), tail.eq(nxt), tail_missing.eq(s2_missing)]

        if self.residue is not None:
            self._residue_check(m, tail_valid, tail, tail_missing)
            return m

        # Correction stages: undo the zero bytes of a partial last beat, A^-(2^j) per bit j of
        # k, two bits a stage: one of four maps, chosen by them (the first stage also applies
        # the constant A^-fixed of ``end_mod4``).
        # (a packet's last beat loaded ``state`` with what ``tail`` holds: no copy needed)
        cur_v, cur_s, cur_k = tail_valid, state, tail_missing
        for n, bits in enumerate(self.kgroups):
            fixed = self.fixed if n == 0 else 0
            tag = "_".join(str(j) for j in bits)
            nv, ns, nk = Signal(name=f"c{tag}_valid"), Signal(32, name=f"c{tag}_s"), \
                Signal(self.kbits, name=f"c{tag}_k")
            m.d.sync += [nv.eq(cur_v), nk.eq(cur_k)]
            with m.Switch(Cat(*[cur_k[j] for j in bits])):
                for v in range(1 << len(bits)):
                    amount = fixed + sum(1 << j for b, j in enumerate(bits) if v >> b & 1)
                    with m.Case(v):
                        m.d.sync += ns.eq(_xor_rows(_mat_inv(_advance_rows(amount)), cur_s)
                                          if amount else cur_s)
            cur_v, cur_s, cur_k = nv, ns, nk

        m.d.comb += [self.o.valid.eq(cur_v), self.o.payload.eq(cur_s ^ CRC_XOROUT)]
        return m

    def _residue_check(self, m, tail_valid, tail, tail_missing):
        """The checker's verdict on ``o``: the state after the last beat (``tail``) against the
        residue after ``tail_missing`` zero bytes."""
        nb = self.nbytes
        # The residue after k trailing zero bytes is A^k·R: compare with the k-th constant,
        # then delay the verdict to ``latency``.
        raw = self.residue ^ CRC_XOROUT
        consts = [crc32_update(raw, bytes(k)) for k in range(nb + 1)]
        want = Signal(32)
        with m.Switch(tail_missing):
            for k, c in enumerate(consts):
                with m.Case(k):
                    m.d.comb += want.eq(c)
        cur_v, cur_ok = tail_valid, Signal()
        extra = self.latency - (2 - self.fold + self.xor_stage)
        if extra:
            # a latency above the least registers the compare's two halves, so that the
            # constant's select and the 32-bit AND do not meet in one stage
            halves = [Signal(name=f"eq_h{h}") for h in range(2)]
            m.d.sync += [q.eq(tail[16 * h:16 * h + 16] == want[16 * h:16 * h + 16])
                         for h, q in enumerate(halves)]
            nv = Signal(name="eq_valid")
            m.d.sync += nv.eq(tail_valid)
            cur_v, extra = nv, extra - 1
            m.d.comb += cur_ok.eq(halves[0] & halves[1])
        else:
            m.d.comb += cur_ok.eq(tail == want)
        for j in range(extra):
            nv, nok = Signal(name=f"d{j}_valid"), Signal(name=f"d{j}_ok")
            m.d.sync += [nv.eq(cur_v), nok.eq(cur_ok)]
            cur_v, cur_ok = nv, nok
        m.d.comb += [self.o.valid.eq(cur_v), self.o.payload.eq(cur_ok)]


def _self_check():
    assert crc32_update(CRC_INIT, b"123456789") ^ CRC_XOROUT == zlib.crc32(b"123456789")


_self_check()
