"""The board sequencer's script: what :class:`~rnic.board.sequencer.Sequencer` plays and checks.

A :class:`Program` is data, made outside the hardware: ``sim/board_program.py`` records it from
the project's own driver (the book's 9-step SEND), and the board build and
``tb/system/test_board.py`` pass it to :class:`~rnic.board.top.BoardCore`.
"""

from dataclasses import dataclass, field

__all__ = ["Program", "MEM_BYTES"]

#: Bytes of the board's host memory on block RAM (the size of ``Program.mem``).
MEM_BYTES = 16 * 1024


@dataclass
class Program:
    steps: list                   # ("W", addr, data) | ("POLL", CMD_STATUS offset)
    mem: bytearray                # initial host-memory image, MEM_BYTES
    frame: bytes                  # the SEND_ONLY frame into s_axis_rx
    ack: bytes                    # the ACK frame expected on m_axis_tx
    checks: list = field(default_factory=list)   # (byte address, expected bytes) in RAM
    cqe_addr: int = 0             # the CQE slot; its byte 31 bit 0 (phase) is polled
