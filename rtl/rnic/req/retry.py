"""Reliability Engine constants: the retransmit and RNR timer tables, the NAK → status map.

Used by :class:`rnic.req.Requester` (whose completer owns the per-QP retry state) and by the
Python model ``sim/models/requester.py`` (which re-derives the same numbers from the spec).

* Retransmit timeout (roce-reference.md §5, rxe ``qp_timeout_jiffies``): 4.096 µs · 2^timeout,
  ``timeout`` = 0 means no timer. Counted here in whole microseconds, rounded up.
* RNR NAK timer codes (roce-reference.md §2): code 0 = 655.36 ms, 1 = 0.01 ms, …, 31 = 491.52 ms.
* NAK codes (AETH syndrome bits 6:5 = 11): 0x60 PSN sequence error (go-back-N); 0x61
  REM_INV_REQ_ERR; 0x62 REM_ACCESS_ERR; 0x63 and any other (reserved) code REM_OP_ERR.
"""

from amaranth.hdl import Signal

from ..opcodes import WcStatus

__all__ = ["TIMER_BITS", "TIMEOUT_US", "RNR_US", "timeout_us", "rnr_us", "nak_status",
           "rom"]

#: Width of the free-running microsecond clock and of each QP's deadline. Serial comparison
#: needs every duration below 2^(TIMER_BITS-1): the longest is 4.096 µs · 2^31 ≈ 2^33 µs.
TIMER_BITS = 36


def timeout_us(code):
    """Retransmit timeout of a QP's 5-bit ``timeout`` in µs, rounded up (0: no timer)."""
    if code == 0:
        return 0
    return -(-(4096 << code) // 1000)


_RNR_MS100 = [65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
              768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152]


def rnr_us(code):
    """RNR NAK timer of a 5-bit code in µs (roce-reference.md §2; code 25 is 61.44 ms)."""
    return _RNR_MS100[code & 31] * 10


TIMEOUT_US = [timeout_us(c) for c in range(32)]
RNR_US = [rnr_us(c) for c in range(32)]


def nak_status(syndrome):
    """Completion status of a NAK that ends the QP (not 0x60, not RNR)."""
    return {0x61: WcStatus.REM_INV_REQ_ERR, 0x62: WcStatus.REM_ACCESS_ERR}.get(
        syndrome & 0x7F, WcStatus.REM_OP_ERR)


def rom(m, index, table, width, name):
    """A combinational lookup ``table[index]`` of ``width`` bits."""
    out = Signal(width, name=name)
    with m.Switch(index):
        for i, v in enumerate(table):
            with m.Case(i):
                m.d.comb += out.eq(v)
    return out
