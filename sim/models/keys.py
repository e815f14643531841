"""Python model of the Key Cache's key table and its rules (interface.md §4.2, §5.3).

Written from the contract, not from the RTL: the test benches check the hardware against it.

* ``set_key(slot, args)`` → 0 ok / 3 refused (SET_KEY, ARG0..ARG8).
* ``query(slot)`` → ARG0..ARG8 in the SET_KEY layout, valid [28] = current state.
* ``invalidate(key)`` → True if accepted (INVALIDATE command or IETH; same rules).
* ``lookup(key, pd, access, va, length)`` → dict(ok, miss, bad_pd, bad_access, bad_range,
  bus_addr).
"""

__all__ = ["MR", "FAST_REG_MR", "MW_TYPE1", "MW_TYPE2", "KeyModel", "pack_arg7", "set_args"]

MR, FAST_REG_MR, MW_TYPE1, MW_TYPE2 = 0, 1, 2, 3
M64 = (1 << 64) - 1


def pack_arg7(pd, access, type_, valid):
    return (pd & 0xFFFF) | (access & 0xFF) << 16 | (type_ & 3) << 24 | (1 if valid else 0) << 28


def set_args(key, iova, length, bus, pd, access, type_, valid, mr=0):
    """ARG0..ARG8 of a SET_KEY."""
    return [key & 0xFFFFFFFF, iova & 0xFFFFFFFF, iova >> 32 & 0xFFFFFFFF,
            length & 0xFFFFFFFF, length >> 32 & 0xFFFFFFFF, bus & 0xFFFFFFFF,
            bus >> 32 & 0xFFFFFFFF, pack_arg7(pd, access, type_, valid), mr]


class _Slot:
    def __init__(self):
        self.key = 0
        self.iova = 0
        self.length = 0
        self.bus = 0
        self.pd = 0
        self.access = 0
        self.type = MR
        self.valid = False
        self.mr = 0


class KeyModel:
    def __init__(self, key_entries):
        self.n = key_entries
        self.slots = [_Slot() for _ in range(key_entries)]

    # -- helpers
    def _find(self, key):
        hits = [i for i, s in enumerate(self.slots) if s.valid and s.key == key]
        assert len(hits) <= 1, "model invariant: keys unique among valid slots"
        return hits[0] if hits else None

    def bound_windows(self, mr_slot):
        return sum(1 for i, s in enumerate(self.slots)
                   if s.valid and s.type in (MW_TYPE1, MW_TYPE2) and s.mr == mr_slot)

    @staticmethod
    def _is_mw(t):
        return t in (MW_TYPE1, MW_TYPE2)

    # -- commands
    def set_key(self, slot, args):
        key = args[0]
        iova = args[1] | args[2] << 32
        length = args[3] | args[4] << 32
        bus = args[5] | args[6] << 32
        a7 = args[7]
        pd, access, type_, valid = a7 & 0xFFFF, a7 >> 16 & 0xFF, a7 >> 24 & 3, bool(a7 >> 28 & 1)
        mr = args[8]
        old = self.slots[slot]
        if valid:
            h = self._find(key)
            if h is not None and h != slot:
                return 3                        # key held by another valid slot
        if old.valid and not self._is_mw(old.type) and self.bound_windows(slot):
            return 3                            # MR with windows bound
        if valid and self._is_mw(type_):
            if mr >= self.n or mr == slot:
                return 3
            t = self.slots[mr]
            if not t.valid or self._is_mw(t.type):
                return 3                        # binds only to a valid MR
            if iova < t.iova or iova + length > t.iova + t.length:
                return 3                        # window range not inside its MR
        s = _Slot()
        s.key, s.iova, s.length, s.bus = key, iova, length, bus
        s.pd, s.access, s.type, s.valid = pd, access, type_, valid
        s.mr = mr % self.n
        self.slots[slot] = s
        return 0

    def query(self, slot):
        s = self.slots[slot]
        return set_args(s.key, s.iova, s.length, s.bus, s.pd, s.access, s.type, s.valid, s.mr)

    def invalidate(self, key):
        h = self._find(key)
        if h is None:
            return False                        # unknown or already invalid
        s = self.slots[h]
        if s.type == FAST_REG_MR and not self.bound_windows(h):
            s.valid = False
            return True
        if s.type == MW_TYPE2:
            s.valid = False                     # unbinds it from its MR
            return True
        return False                            # ordinary MR, MR with windows, type 1 window

    # -- lookups
    def lookup(self, key, pd, access, va, length):
        h = self._find(key)
        if h is None:
            return dict(ok=0, miss=1, bad_pd=0, bad_access=0, bad_range=0, bus_addr=None)
        s = self.slots[h]
        bad_pd = s.pd != pd
        bad_access = (access & ~s.access) & 0x1F != 0
        bad_range = not (s.iova <= va and va + length <= s.iova + s.length)
        t = self.slots[s.mr] if self._is_mw(s.type) else s
        bus = (t.bus + va - t.iova) & M64
        ok = not (bad_pd or bad_access or bad_range)
        return dict(ok=int(ok), miss=0, bad_pd=int(bad_pd), bad_access=int(bad_access),
                    bad_range=int(bad_range), bus_addr=bus if ok else None)
