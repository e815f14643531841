"""Interfaces shared between blocks: defined once here so every block and test agrees.

Command ports (mailbox → owning block)
--------------------------------------
The control plane's mailbox (``control/control_plane.py``) decodes ``CMD``, checks the opcode and
the index range, then hands the command to the block that owns the opcode through a
:func:`CommandSignature` port: one ``cmd`` transfer ({opcode, index}), then exactly one ``resp``
transfer ({result}). Only one command is outstanding at a time. Between the two the block reaches
ARG0..ARG15 one 32-bit word at a time through the port's ARG access: it puts an ARG number on
``arg_addr`` and finds that ARG on ``arg_data`` in the next cycle (a synchronous read); with
``arg_we`` high, ``arg_wdata`` is written to ARG ``arg_addr`` at the end of the cycle (query
results; a read of that ARG in the same cycle finds the old word, from the next cycle on the new
one; a block writes its last ARG no later than the cycle of its response).
The ARGs hold still while a command runs (software writes to them are ignored while busy), so a
block reads only the words it needs, when it needs them, and keeps no copy of the others.
``resp.result`` is the ``CMD_STATUS`` result code (0 ok, 3 bad argument / illegal state change);
a query's ARG writes are done before its ``resp``. A command's effect must be complete, for every
later packet, when the ``resp`` transfer happens.

Statistics
----------
Every block that counts something has a ``stat`` output of :data:`NUM_COUNTERS` bits: bit ``i``
high for one cycle adds 1 to counter ``i`` (interface.md §4.5). The top adds up the strobes of
all blocks, so two blocks may count the same counter in the same cycle.

Events
------
Blocks raise events (interface.md §4.4) through a ``stream.Signature(event_layout)`` output.
"""

from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "NUM_ARGS", "NUM_COUNTERS", "CmdOp", "Result", "EventType",
    "cmd_layout", "resp_layout", "CommandSignature", "event_layout", "qpn_layout", "QpnStream",
    "bth_fields", "rx_meta_layout", "read_job_layout",
    "resp_hdr_layout", "ack_layout", "AckKind", "READ_SLOT_BITS", "read_rec_layout",
    "read_dec_layout",
    "Counter",
]

NUM_ARGS = 16
NUM_COUNTERS = 16


class CmdOp(enum.IntEnum, shape=8):
    SET_QP = 0x01
    QUERY_QP = 0x02
    SET_CQ = 0x03
    SET_KEY = 0x04
    QUERY_KEY = 0x05
    INVALIDATE = 0x06


class Result(enum.IntEnum, shape=8):
    OK = 0
    UNKNOWN_OPCODE = 1
    BAD_INDEX = 2
    BAD_ARGUMENT = 3


class EventType(enum.IntEnum, shape=8):
    COMPLETION = 1
    CQ_OVERFLOW = 2
    QP_ERROR = 3
    HOST_FAULT = 4


class Counter(enum.IntEnum, shape=range(16)):
    """Counter numbers of interface.md §4.5."""
    RX_FRAMES = 0
    MAC_DROP = 1
    NOT_ROCE = 2
    BAD_IP_UDP = 3
    BAD_ICRC = 4
    BAD_BTH = 5
    NO_QP = 6
    DUPLICATES = 7
    SEQ_NAKS = 8
    RNR_NAKS = 9
    OTHER_NAKS = 10
    ACKS = 11
    TX_FRAMES = 12
    RETRANSMITS = 13
    COMPLETIONS = 14
    BYPASS = 15


cmd_layout = data.StructLayout({
    "opcode": 8,
    "index": 24,
})

resp_layout = data.StructLayout({
    "result": 8,
})


def CommandSignature():
    """A command port as seen by the block that executes the command (see the module doc)."""
    return wiring.Signature({
        "cmd": In(stream.Signature(cmd_layout)),
        "resp": Out(stream.Signature(resp_layout)),
        "arg_addr": Out(4),
        "arg_data": In(32),
        "arg_we": Out(1),
        "arg_wdata": Out(32),
    })


event_layout = data.StructLayout({
    "type": 4,
    "number": 24,
})

#: One QP number: the payload of every stream that names a QP and nothing else (resets,
#: faults, the requester's context requests).
qpn_layout = data.StructLayout({"qpn": 24})


def QpnStream():
    """A stream of QP numbers: ``stream.Signature(qpn_layout)``."""
    return stream.Signature(qpn_layout)


#: One RDMA READ to answer (interface.md §7), from the execute stage to the READ response
#: engine, in command order: the local QPN, the PSN of the first response, the MSN its AETHs
#: carry, the bus address of the first byte (the rkey's translation of the RETH VA), the byte
#: count (0..2^31) and the QP's path MTU code (1..5: 256 << (code - 1) bytes per response).
read_job_layout = data.StructLayout({
    "qpn": 24, "psn": 24, "msn": 24, "addr": 64, "len": 32, "pmtu": 3,
})


#: A response frame PSN Check accepted for the requester (an RTS QP, from its remote IPv4):
#: ACKNOWLEDGE 0x11 or a READ response 0x0D–0x10, its QPN (local), PSN, AETH syndrome (0 for
#: MIDDLE) and payload length in bytes (pad excluded). A READ response with ``len`` > 0 has its
#: payload beats on PSN Check's ``rr_pay``, in the same order.
resp_hdr_layout = data.StructLayout({"opcode": 8, "qpn": 24, "psn": 24, "syndrome": 8,
                                     "len": 13})


class AckKind(enum.IntEnum, shape=2):
    """What an ``ack_layout`` record into the requester's completer is."""
    WIRE = 0        #: a received ACKNOWLEDGE (its PSN and syndrome as on the wire)
    PLACED = 1      #: the READ response at ``psn`` is placed (every write of it OKAY)
    DECIDE = 2      #: may the READ response at ``psn`` be placed? (answered on ``read_dec``)


#: One event for the requester's completer (see :class:`AckKind`).
ack_layout = data.StructLayout({"qpn": 24, "psn": 24, "syndrome": 8, "kind": 2})

#: Bits of a READ slot index (at most 64 READs outstanding over every QP).
READ_SLOT_BITS = 6

#: A READ slot written by the requester's engine when it first sends a READ: what placing its
#: responses needs. ``qpn`` its QP, ``fpsn`` the first PSN of the READ's responses and ``span``
#: their number less one, max(1, ⌈total/PMTU⌉) − 1 (the last PSN is fpsn + span), ``pmtu``
#: the path MTU code (1..5), ``total`` the byte count, and its destination: ``len0`` bytes at bus
#: address ``addr0`` (SGE 0), then the rest at ``addr1`` (SGE 1).
read_rec_layout = data.StructLayout({
    "idx": READ_SLOT_BITS, "qpn": 24, "fpsn": 24, "span": 24, "pmtu": 3, "total": 32,
    "addr0": 64, "len0": 32, "addr1": 64,
})

#: The completer's answer to a DECIDE: ``ok`` = place it, through READ slot ``idx``; ``una``
#: = the QP's oldest unacknowledged PSN as the answer leaves it (every PSN before it is
#: acknowledged: a READ response there is stale and would be refused), valid when ``una_v``
#: (0 when a SET_QP of the QP met the answer); ``gap`` = refused after a gap: the oldest WQE is
#: a READ whose response at ``una`` is missing, so every response after ``una`` would be
#: refused until that one is placed.
read_dec_layout = data.StructLayout({"ok": 1, "idx": READ_SLOT_BITS, "una": 24, "una_v": 1,
                                     "gap": 1})


#: The BTH fields a later stage reads, in the order every header record here lists them.
bth_fields = {"opcode": 8, "se": 1, "padcnt": 2, "dqpn": 24, "ackreq": 1, "psn": 24}

#: Header metadata of one accepted frame, as RX Parse emits it (one entry per frame): the fields a
#: later stage reads, nothing else (RX Parse checks the P_Key, TVer and addresses itself; the
#: responses are addressed from the QP context). Multi-byte fields are integers assembled
#: big-endian from the wire (``imm``'s first wire byte is ``imm[31:24]``). Fields of headers the
#: opcode does not carry are 0.
rx_meta_layout = data.StructLayout({
    **bth_fields,
    "reth_va": 64,
    "reth_rkey": 32,
    "reth_len": 32,
    "imm_or_rkey": 32,      # the ImmDt, or the IETH's rkey (no opcode carries both)
    "aeth_syndrome": 8,
    "src_ip": 32,           # compared with the QP's remote IPv4
    "payload_len": 13,      # payload bytes, pad and ICRC excluded (≤ 4200)
})
