"""Configuration of one generated core, checked at elaboration (interface.md §1)."""

from dataclasses import dataclass, asdict

from .stream import WIDTHS

__all__ = ["RnicConfig", "ConfigError"]


class ConfigError(ValueError):
    """A configuration value outside the contract; the message is one line saying why."""


def _pow2(n):
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class RnicConfig:
    """Parameters of ``rnic generate`` (interface.md §1).

    Attributes
    ----------
    data_width : int
        W, the MAC stream and host-memory data width: 64, 128, 256 or 512.
    num_qp : int
        Queue pairs, a power of two, 4 ≤ N ≤ 4096 (QPN 0 and 1 are reserved).
    num_cq : int
        Completion queues, a power of two, 1 ≤ C ≤ 1024.
    key_entries : int
        Key-table (CAM) slots, a power of two, 4 ≤ K ≤ 1024.
    clock_mhz : float
        Core clock in MHz (> 0); sets the reset value of US_CYCLES and the synthesis target.
    read : bool
        RDMA READ as responder and requester (contract version 2.0, the default). False
        (``--no-read``) builds the core without it, as contract version 1.0: VERSION reads 1.0,
        a READ request is refused as an atomic one (NAK 0x61, the QP to ERROR), a send WQE of
        opcode 5 is a bad opcode (LOC_QP_OP_ERR) and a READ response is dropped and counted
        as 6 like any unexpected response; the READ response engine and READ placement are
        not built.
    """
    data_width: int = 64
    num_qp: int = 256
    num_cq: int = 64
    key_entries: int = 64
    clock_mhz: float = 156.25
    read: bool = True

    def __post_init__(self):
        for reason in self.problems():
            raise ConfigError(reason)

    def problems(self):
        out = []
        if self.data_width not in WIDTHS:
            out.append(f"--data-width {self.data_width}: must be one of 64, 128, 256, 512 "
                       "(the MAC and AXI data widths the datapath is built for)")
        for flag, val, lo, hi, why in (
                ("--num-qp", self.num_qp, 4, 4096,
                 "QPNs 0 and 1 are reserved and QP context lives in block RAM"),
                ("--num-cq", self.num_cq, 1, 1024, "the CQ table and event queue are sized by it"),
                ("--key-entries", self.key_entries, 4, 1024,
                 "every slot of the key CAM is compared in parallel")):
            if not isinstance(val, int) or isinstance(val, bool):
                out.append(f"{flag} {val!r}: must be an integer")
            elif not _pow2(val):
                out.append(f"{flag} {val}: must be a power of two ({why})")
            elif not lo <= val <= hi:
                out.append(f"{flag} {val}: must be between {lo} and {hi} ({why})")
        try:
            f = float(self.clock_mhz)
            if not f > 0 or f != f or f == float("inf"):
                raise ValueError
        except (TypeError, ValueError):
            out.append(f"--clock-mhz {self.clock_mhz!r}: must be a positive number of MHz "
                       "(it sets US_CYCLES, the time base of every timer)")
        if not isinstance(self.read, bool):
            out.append(f"read {self.read!r}: must be a bool (--no-read builds the core without "
                       "RDMA READ)")
        return out

    @property
    def lanes(self):
        return self.data_width // 8

    @property
    def us_cycles(self):
        """Reset value of US_CYCLES: clock cycles per microsecond, round(F)."""
        return max(1, int(float(self.clock_mhz) + 0.5))

    def as_dict(self):
        return asdict(self)
