"""The register map (interface.md §4) as one data table.

The hardware's address decoder, the Python driver (``sim/driver``) and the register-map page of
the docs (``python -m rnic.control.regmap``) are all made from :data:`REGISTERS`.
"""

from typing import NamedTuple

__all__ = ["Reg", "REGISTERS", "BY_NAME", "ID_VALUE", "VERSION_VALUE", "VERSION_NO_READ",
           "markdown"]

ID_VALUE = 0x524E4943          # "RNIC"
VERSION_VALUE = (2 << 16) | 0  # 2.0: RDMA READ (interface.md §7)
VERSION_NO_READ = (1 << 16) | 0  # 1.0: a core built without RDMA READ (RnicConfig.read False)


class Reg(NamedTuple):
    name: str
    offset: int
    access: str          # "R", "RW", "W" (write-only, reads 0), "R/pop" (a read has an effect)
    doc: str
    count: int = 1       # registers in an array (ARG0..15, counters 0..15), 4 bytes apart


REGISTERS = [
    Reg("ID", 0x0000, "R", 'Identity, 0x524E4943 ("RNIC")'),
    Reg("VERSION", 0x0004, "R", "major<<16 | minor: 2.0"),
    Reg("CAPS0", 0x0008, "R", "W/8 [7:0], log2(num_qp) [15:8], log2(num_cq) [23:16], "
                              "log2(key_entries) [31:24]"),
    Reg("MAC_LO", 0x0010, "RW", "local MAC bytes 2..5 (02:00:00:00:00:01 -> 0x00000001)"),
    Reg("MAC_HI", 0x0014, "RW", "local MAC bytes 0..1 in bits 15:0 (02:00:... -> 0x0200)"),
    Reg("IPV4", 0x0018, "RW", "local IPv4, first octet in bits 31:24"),
    Reg("US_CYCLES", 0x0020, "RW", "clock cycles per microsecond (time base of every timer); "
                                   "reset value round(--clock-mhz)"),
    Reg("ARG", 0x0100, "RW", "command arguments ARG0..ARG15; query results come back here", 16),
    Reg("CMD", 0x0140, "W", "opcode [7:0], index [31:8]; ignored while busy"),
    Reg("CMD_STATUS", 0x0144, "R", "busy [0], result [15:8] (0 ok, 1 unknown opcode, "
                                   "2 index out of range, 3 bad argument / illegal state change)"),
    Reg("RQ_DB", 0x1000, "W", "QPN [31:16], RQ producer index [15:0]"),
    Reg("SQ_DB", 0x1004, "W", "QPN [31:16], SQ producer index [15:0]"),
    Reg("CQ_DB", 0x1008, "W", "CQN [31:16], CQ consumer index [15:0]"),
    Reg("CQ_ARM", 0x100C, "W", "CQN [31:16], mode [1:0] (1 next completion, 2 next solicited "
                               "or error completion); one-shot"),
    Reg("EVENT", 0x1010, "R/pop", "each read pops one event: valid [31], lost-before [30], "
                                  "type [27:24], number [23:0]"),
    Reg("IRQ_EN", 0x1014, "RW", "bit 0: irq is high while set and the event queue is not empty"),
    Reg("COUNTER", 0x2000, "R", "saturating 32-bit counters 0..15 (interface.md §4.5)", 16),
]

BY_NAME = {r.name: r for r in REGISTERS}

COUNTER_NAMES = [
    "frames received", "dropped by MAC (tuser)", "not RoCE / not for us",
    "bad IPv4/UDP header", "bad ICRC", "bad BTH", "no QP to take it", "duplicates answered",
    "sequence-error NAKs", "RNR NAKs", "other NAKs", "positive ACKs sent", "frames sent",
    "retransmitted packets", "completions written", "bypassed frames",
]


def markdown():
    """The register map as a Markdown table (for docs/registers.md)."""
    lines = ["| offset | name | access | meaning |", "|---|---|---|---|"]
    for r in REGISTERS:
        if r.count == 1:
            lines.append(f"| 0x{r.offset:04X} | {r.name} | {r.access} | {r.doc} |")
        else:
            last = r.offset + 4 * (r.count - 1)
            lines.append(f"| 0x{r.offset:04X}–0x{last:04X} | {r.name}0..{r.count - 1} | "
                         f"{r.access} | {r.doc} |")
    lines += ["", "| counter | meaning |", "|---|---|"]
    lines += [f"| {i} (0x{0x2000 + 4 * i:04X}) | {n} |" for i, n in enumerate(COUNTER_NAMES)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
