"""Register layer of the driver: named register access over cocotbext-axi's AxiLiteMaster.

Offsets come from ``rnic.control.regmap.REGISTERS`` — the same table the hardware decodes.
"""

from rnic.control.regmap import BY_NAME
from rnic.ifaces import NUM_ARGS

__all__ = ["Regs", "CmdError", "mac_to_regs", "ip_to_reg"]


class CmdError(Exception):
    def __init__(self, result, opcode, index):
        super().__init__(f"command {opcode:#04x} index {index} failed with result {result}")
        self.result = result


def mac_to_regs(mac):
    """'02:00:00:00:00:01' or an int → (MAC_LO, MAC_HI)."""
    if isinstance(mac, str):
        mac = int(mac.replace(":", ""), 16)
    return mac & 0xFFFFFFFF, (mac >> 32) & 0xFFFF


def ip_to_reg(ip):
    if isinstance(ip, str):
        a = [int(x) for x in ip.split(".")]
        return (a[0] << 24) | (a[1] << 16) | (a[2] << 8) | a[3]
    return ip


class Regs:
    """Named registers of one core behind an ``AxiLiteMaster``."""

    def __init__(self, axil):
        self.axil = axil

    @staticmethod
    def offset(name, i=0):
        r = BY_NAME[name]
        if not 0 <= i < r.count:
            raise IndexError(f"{name}{i}: only {r.count} registers")
        return r.offset + 4 * i

    async def read(self, name, i=0):
        return await self.axil.read_dword(self.offset(name, i))

    async def write(self, name, value, i=0):
        await self.axil.write_dword(self.offset(name, i), value & 0xFFFFFFFF)

    async def counter(self, i):
        return await self.read("COUNTER", i)

    async def counters(self):
        return [await self.counter(i) for i in range(16)]

    async def status(self):
        v = await self.read("CMD_STATUS")
        return v & 1, (v >> 8) & 0xFF

    async def wait_idle(self, limit=100000):
        for _ in range(limit):
            busy, result = await self.status()
            if not busy:
                return result
        raise TimeoutError("CMD_STATUS stayed busy")

    async def command(self, opcode, index=0, args=(), *, check=True):
        """Write ARG0..ARGn, CMD; wait for busy to clear; return (result, ARG0..15)."""
        await self.wait_idle()
        for i, a in enumerate(args):
            await self.write("ARG", a, i)
        await self.write("CMD", (opcode & 0xFF) | ((index & 0xFFFFFF) << 8))
        result = await self.wait_idle()
        out = [await self.read("ARG", i) for i in range(NUM_ARGS)]
        if check and result != 0:
            raise CmdError(result, opcode, index)
        return result, out

    async def set_local(self, mac, ip):
        lo, hi = mac_to_regs(mac)
        await self.write("MAC_LO", lo)
        await self.write("MAC_HI", hi)
        await self.write("IPV4", ip_to_reg(ip))

    async def doorbell(self, name, number, value):
        await self.write(name, ((number & 0xFFFF) << 16) | (value & 0xFFFF))

    async def pop_event(self):
        """(valid, lost, type, number) of the next event."""
        v = await self.read("EVENT")
        return (v >> 31) & 1, (v >> 30) & 1, (v >> 24) & 0xF, v & 0xFFFFFF
