"""The board's sequencer: plays a recorded :class:`~rnic.board.program.Program` into one core.

1. Register steps over AXI4-Lite, in order: ``W`` writes one register (AW and W together, then
   B); ``POLL`` reads CMD_STATUS until busy [0] clears and fails unless result [15:8] is 0.
2. The SEND frame from a ROM into ``s_axis_rx`` (``tkeep`` contiguous, ``tlast`` on the last beat).
3. Meanwhile a checker takes every beat of ``m_axis_tx`` (``tready`` high) and compares it
   with the expected ACK frame (data under ``tkeep``, ``tkeep``, ``tlast``); a second frame, or
   any difference, fails.
4. After the ACK, host memory is read through the RAM's check port and compared word by word
   with the expected CQE and payload (masked to the bytes that matter); the comparison is
   repeated until it matches (the CQE follows the ACK) or a retry limit runs out.

``passed``/``failed`` stay high once set; ``stage`` says where it is (0 registers, 1 frame in,
2 waiting for the ACK, 3 checking memory, 4 done). A watchdog fails the run after
``timeout`` cycles.
"""

import types

from amaranth.hdl import Elaboratable, Module, Signal, Const
from amaranth.lib.memory import Memory

from ..parts import add as _add

__all__ = ["Sequencer"]


def _beats(frame, width):
    lanes = width // 8
    out = []
    n = (len(frame) + lanes - 1) // lanes
    for i in range(n):
        chunk = frame[i * lanes:(i + 1) * lanes]
        keep = (1 << len(chunk)) - 1
        out.append((int.from_bytes(chunk, "little"), keep, int(i == n - 1)))
    return out


def _pack_beats(beats, width):
    return [d | (k << width) | (last << (width + width // 8)) for d, k, last in beats]


class Sequencer(Elaboratable):
    def __init__(self, program, *, width=64, abits=11, timeout=1 << 22, retries=1 << 12):
        self.program = program
        self.width = width
        self.lanes = width // 8
        W = width
        # AXI4-Lite master to the core
        self.awaddr = Signal(16)
        self.awvalid = Signal()
        self.awready = Signal()
        self.wdata = Signal(32)
        self.wstrb = Signal(4)
        self.wvalid = Signal()
        self.wready = Signal()
        self.bvalid = Signal()
        self.bready = Signal()
        self.araddr = Signal(16)
        self.arvalid = Signal()
        self.arready = Signal()
        self.rdata = Signal(32)
        self.rvalid = Signal()
        self.rready = Signal()
        # frame source (to s_axis_rx) and ACK sink (from m_axis_tx)
        self.rx_tdata = Signal(W)
        self.rx_tkeep = Signal(W // 8)
        self.rx_tlast = Signal()
        self.rx_tvalid = Signal()
        self.rx_tready = Signal()
        self.tx_tdata = Signal(W)
        self.tx_tkeep = Signal(W // 8)
        self.tx_tlast = Signal()
        self.tx_tvalid = Signal()
        self.tx_tready = Signal()
        # RAM check port
        self.chk_addr = Signal(abits)
        self.chk_data = Signal(W)
        # status
        self.passed = Signal()
        self.failed = Signal()
        self.stage = Signal(3)
        self.timeout = timeout
        self.retries = retries

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(W=self.width, L=self.lanes)
        _add(t, self._roms(m, t))
        _add(t, self._ack_checker(m, t))
        self._watchdog(m, t)
        self._sequence(m, t)
        return m

    def _roms(self, m, t):
        """The program's ROMs, read asynchronously (they are small): the register steps, the
        SEND frame's beats, the expected ACK's beats and the memory checks (word address,
        value, byte mask), each with the counter that addresses it; and the AXI4-Lite address
        and data, taken from the current step. Adds the read ports (``srp``, ``frp``, ``arp``,
        ``crp``), the counters (``pc``, ``beat``, ``ack_beat``, ``ck``), ``is_poll`` and the
        step and check counts (``n_steps``, ``n_chk``)."""
        W, L = t.W, t.L
        p = self.program
        # ---- ROMs (asynchronous reads: small) ---------------------------------------------
        steps = [(1 << 48) | (s[1] << 32) if s[0] == "POLL" else (s[1] << 32) | s[2]
                 for s in p.steps]
        m.submodules.step_rom = step_rom = Memory(shape=49, depth=len(steps), init=steps)
        frame = _pack_beats(_beats(p.frame, W), W)
        ack = _pack_beats(_beats(p.ack, W), W)
        m.submodules.frame_rom = frame_rom = Memory(shape=W + L + 1, depth=len(frame),
                                                    init=frame)
        m.submodules.ack_rom = ack_rom = Memory(shape=W + L + 1, depth=len(ack), init=ack)
        chk = []
        for addr, data in p.checks:
            for off in range(0, len(data)):
                wa, lane = (addr + off) // L, (addr + off) % L
                if not chk or chk[-1][0] != wa:
                    chk.append([wa, 0, 0])
                chk[-1][1] |= data[off] << (8 * lane)
                chk[-1][2] |= 0xFF << (8 * lane)
        chk_init = [(wa << (2 * W)) | (mask << W) | val for wa, val, mask in chk]
        abits = len(self.chk_addr)
        m.submodules.chk_rom = chk_rom = Memory(shape=2 * W + abits, depth=len(chk),
                                                init=chk_init)
        srp = step_rom.read_port(domain="comb")
        frp = frame_rom.read_port(domain="comb")
        arp = ack_rom.read_port(domain="comb")
        crp = chk_rom.read_port(domain="comb")

        pc = Signal(range(len(steps) + 1))
        beat = Signal(range(len(frame) + 1))
        ack_beat = Signal(range(len(ack) + 1))
        ck = Signal(range(len(chk) + 1))
        m.d.comb += [srp.addr.eq(pc), frp.addr.eq(beat), arp.addr.eq(ack_beat), crp.addr.eq(ck)]

        is_poll = srp.data[48]
        m.d.comb += [self.awaddr.eq(srp.data[32:48]), self.wdata.eq(srp.data[:32]),
                     self.wstrb.eq(0xF), self.araddr.eq(srp.data[32:48])]
        return types.SimpleNamespace(srp=srp, frp=frp, arp=arp, crp=crp, pc=pc, beat=beat,
                                     ack_beat=ack_beat, ck=ck, is_poll=is_poll,
                                     n_steps=len(steps), n_chk=len(chk))

    def _ack_checker(self, m, t):
        """The ACK checker, always ready on ``m_axis_tx``: each beat is compared with the
        expected ACK's (data under ``tkeep``, ``tkeep``, ``tlast``); a difference, or a beat
        after the ACK's last, sets ``ack_bad``, and the last beat sets ``ack_done``. Adds
        ``ack_done`` and ``ack_bad``."""
        W, L, arp, ack_beat = t.W, t.L, t.arp, t.ack_beat
        # ---- the ACK checker (runs all the time) ------------------------------------------
        ack_done = Signal()
        ack_bad = Signal()
        m.d.comb += self.tx_tready.eq(1)
        keepmask = Signal(W)
        for i in range(L):
            m.d.comb += keepmask[8 * i:8 * i + 8].eq(self.tx_tkeep[i].replicate(8))
        exp_d, exp_k, exp_l = arp.data[:W], arp.data[W:W + L], arp.data[W + L]
        with m.If(self.tx_tvalid):
            with m.If(ack_done | ((self.tx_tdata & keepmask) != (exp_d & keepmask))
                      | (self.tx_tkeep != exp_k) | (self.tx_tlast != exp_l)):
                m.d.sync += ack_bad.eq(1)
            with m.If(self.tx_tlast):
                m.d.sync += ack_done.eq(1)
            with m.Else():
                m.d.sync += ack_beat.eq(ack_beat + 1)
        return types.SimpleNamespace(ack_done=ack_done, ack_bad=ack_bad)

    def _watchdog(self, m, t):
        """The watchdog, which fails a run that is neither passed nor failed ``timeout`` cycles
        after reset, and ``failed``, set by it or by the ACK checker and held."""
        ack_bad = t.ack_bad
        # ---- watchdog ---------------------------------------------------------------------
        wd = Signal(range(self.timeout + 1))
        fail = Signal()
        with m.If(~self.passed & ~self.failed):
            m.d.sync += wd.eq(wd + 1)
            with m.If(wd == self.timeout):
                m.d.comb += fail.eq(1)
        with m.If(fail | ack_bad):
            m.d.sync += self.failed.eq(1)

    def _sequence(self, m, t):
        """The sequence FSM ``seq``: the register steps (:meth:`_register_states`), then the
        frame, the wait for the ACK and the memory checks (:meth:`_check_states`), with
        ``stage`` telling which; the frame source's beat and the check port's address come
        from the ROMs. Adds the AXI4-Lite write's ``aw_ok``/``w_ok`` (its AW, its W taken) and
        the checks' ``tries``."""
        W, L, frp, crp = t.W, t.L, t.frp, t.crp
        # ---- the sequence -----------------------------------------------------------------
        aw_ok = Signal()
        w_ok = Signal()
        tries = Signal(range(self.retries + 1))
        m.d.comb += [self.rx_tdata.eq(frp.data[:W]), self.rx_tkeep.eq(frp.data[W:W + L]),
                     self.rx_tlast.eq(frp.data[W + L]), self.chk_addr.eq(crp.data[2 * W:])]
        _add(t, types.SimpleNamespace(aw_ok=aw_ok, w_ok=w_ok, tries=tries))
        with m.FSM(name="seq"):
            self._register_states(m, t)
            self._check_states(m, t)

    def _register_states(self, m, t):
        """STEP, AW, B, AR and R (inside the sequence FSM): the register steps over AXI4-Lite,
        in order: a ``W`` step writes its register (AW and W, each when its ready comes, then
        B); a ``POLL`` step reads CMD_STATUS until busy clears and fails the run unless the
        result is 0. Past the last step it goes on to FRAME."""
        pc, is_poll, n_steps, aw_ok, w_ok = t.pc, t.is_poll, t.n_steps, t.aw_ok, t.w_ok
        with m.State("STEP"):
            m.d.comb += self.stage.eq(0)
            with m.If(self.failed):
                m.next = "END"
            with m.Elif(pc == n_steps):
                m.next = "FRAME"
            with m.Elif(is_poll):
                m.next = "AR"
            with m.Else():
                m.next = "AW"
        with m.State("AW"):
            m.d.comb += [self.awvalid.eq(~aw_ok), self.wvalid.eq(~w_ok)]
            with m.If(self.awready & ~aw_ok):
                m.d.sync += aw_ok.eq(1)
            with m.If(self.wready & ~w_ok):
                m.d.sync += w_ok.eq(1)
            with m.If((aw_ok | self.awready) & (w_ok | self.wready)):
                m.d.sync += [aw_ok.eq(0), w_ok.eq(0)]
                m.next = "B"
        with m.State("B"):
            m.d.comb += self.bready.eq(1)
            with m.If(self.bvalid):
                m.d.sync += pc.eq(pc + 1)
                m.next = "STEP"
        with m.State("AR"):
            m.d.comb += self.arvalid.eq(1)
            with m.If(self.arready):
                m.next = "R"
        with m.State("R"):
            m.d.comb += self.rready.eq(1)
            with m.If(self.rvalid):
                with m.If(self.rdata[0]):
                    m.next = "AR"                       # busy: ask again
                with m.Elif(self.rdata[8:16] != 0):
                    m.d.sync += self.failed.eq(1)
                    m.next = "END"
                with m.Else():
                    m.d.sync += pc.eq(pc + 1)
                    m.next = "STEP"

    def _check_states(self, m, t):
        """FRAME to END (inside the sequence FSM): the SEND frame into ``s_axis_rx``, the wait
        for the ACK, and the memory checks, word by word through the RAM's check port; a
        mismatch starts the checks again (the CQE follows the ACK) until ``retries`` runs out.
        END holds ``passed`` or ``failed``."""
        W, beat, ack_done, ck, crp, n_chk, tries = (t.W, t.beat, t.ack_done, t.ck, t.crp,
                                                    t.n_chk, t.tries)
        with m.State("FRAME"):
            m.d.comb += [self.stage.eq(1), self.rx_tvalid.eq(1)]
            with m.If(self.rx_tready):
                m.d.sync += beat.eq(beat + 1)
                with m.If(self.rx_tlast):
                    m.next = "WAIT_ACK"
        with m.State("WAIT_ACK"):
            m.d.comb += self.stage.eq(2)
            with m.If(self.failed):
                m.next = "END"
            with m.Elif(ack_done):
                m.next = "CHK_ADDR"
        with m.State("CHK_ADDR"):                      # the check port reads in one cycle
            m.d.comb += self.stage.eq(3)
            m.next = "CHK_CMP"
        with m.State("CHK_CMP"):
            m.d.comb += self.stage.eq(3)
            val, mask = crp.data[:W], crp.data[W:2 * W]
            with m.If((self.chk_data & mask) != val):
                m.d.sync += [ck.eq(0), tries.eq(tries + 1)]
                with m.If(tries == self.retries):
                    m.d.sync += self.failed.eq(1)
                    m.next = "END"
                with m.Else():
                    m.next = "CHK_ADDR"
            with m.Elif(ck == n_chk - 1):
                with m.If(~self.failed):
                    m.d.sync += self.passed.eq(1)
                m.next = "END"
            with m.Else():
                m.d.sync += ck.eq(ck + 1)
                m.next = "CHK_ADDR"
        with m.State("END"):
            m.d.comb += self.stage.eq(4)
