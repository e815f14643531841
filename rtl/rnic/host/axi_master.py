"""The host-memory master: one AXI4 master shared by every block that reads or writes host memory.

Clients (WQE fetch, Scatter Path and CQE Generation now; the requester's SQ fetch and gather
later) each get a read or a write client port. The master splits each request into AXI4 INCR
bursts (at 4 KiB boundaries and at the burst limit), arbitrates round-robin between clients on
AR and on AW, bounds the bursts outstanding, and returns read data and write completions to each
client in that client's request order.

ID map
------
Read client ``i`` issues every burst with ``ARID = i``; write client ``j`` with ``AWID = j``
(AXI4 read and write IDs are independent). A client's bursts share one ID, so the slave returns
them in order; bursts of different clients may come back reordered and, for reads, interleaved
beat by beat. ``R``/``B`` beats with an ID that names no client are taken and ignored.

Reads
-----
A burst is issued only when its client's response buffer (``read_buffer`` beats, one figure
for every client or one per client) has room reserved for all of its beats, so ``rready`` is
always 1. Bursts are at most ``max_burst`` beats (default: 256 or the smallest buffer, whichever
is less). A client whose buffer holds several bursts keeps several in flight, which is what
covers the memory's latency: with latency L cycles, a client streams at one beat per cycle
only if its buffer holds about L + ``max_burst`` beats. The data is **not realigned**: the client receives the raw
aligned bus beats covering ``[addr, addr + len_bytes)``; byte ``addr % (W/8)`` of the first beat
is the first requested byte, and the client knows the offset from its own ``addr``. ``last``
marks the last beat of the request; ``err`` is 1 on every beat whose ``RRESP`` was not OKAY.

Writes
------
The client sends the request, then exactly ``ceil((addr % (W/8) + len_bytes) / (W/8))`` data
beats already aligned to the bus (beat ``k`` covers bus word ``addr // (W/8) + k``; the client
sets ``strb`` for unaligned starts and ends). The master sets ``WLAST`` itself at each burst
end (the client's ``last`` is not used). When every ``B`` of the request is back, one ``done``
transfer ``{tag, err}`` follows (``err`` = some ``BRESP`` was not OKAY), in request order.
W beats leave in AW order, so a writer should issue ``req`` only when its data follows: a
writer that is slow to supply data stalls the W channel for every writer.
``bready`` is always 1: a request's last burst is issued only when its ``done`` has room.

Non-OKAY responses
------------------
The master only reports them (``err``); the client knows which QP the access served and raises
event 4 (host-memory fault) and moves the QP to ERROR (interface.md §2).

Lengths: ``len_bytes`` is 1..4096 in this design's use (any 13-bit length works; a request
may cross several 4 KiB pages). ``len_bytes`` = 0 moves one beat: a reader gets one beat, a
writer must send one beat (with ``strb`` = 0 it writes nothing).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..stream import Queue, check_width

__all__ = ["HostMemory", "AxiSignature", "ReadClientSignature", "WriteClientSignature",
           "req_layout", "read_beat_layout", "write_beat_layout", "done_layout"]

PAGE = 4096
MAX_AXI_BEATS = 256

#: One read or write request of a client.
req_layout = data.StructLayout({
    "addr": 64,
    "len_bytes": 13,     # 1..4096
    "tag": 8,            # the client's own, returned with the data / completion
})

#: A write request's completion: all B responses of the request are back.
done_layout = data.StructLayout({
    "tag": 8,
    "err": 1,
})

_meta_layout = data.StructLayout({"tag": 8, "final": 1})


def read_beat_layout(width):
    """One aligned bus beat returned to a read client."""
    return data.StructLayout({"data": width, "last": 1, "tag": 8, "err": 1})


def write_beat_layout(width):
    """One aligned bus beat sent by a write client."""
    return data.StructLayout({"data": width, "strb": width // 8, "last": 1})


def ReadClientSignature(width):
    """A read client port, as seen by the client (``req`` out, ``resp`` in)."""
    return wiring.Signature({
        "req": Out(stream.Signature(req_layout)),
        "resp": In(stream.Signature(read_beat_layout(width))),
    })


def WriteClientSignature(width):
    """A write client port, as seen by the client (``req`` and ``data`` out, ``done`` in)."""
    return wiring.Signature({
        "req": Out(stream.Signature(req_layout)),
        "data": Out(stream.Signature(write_beat_layout(width))),
        "done": In(stream.Signature(done_layout)),
    })


def AxiSignature(width):
    """AXI4 master signals, as seen by the master. Member ``<ch>_<sig>`` is Verilog
    ``m_axi_<ch><sig>`` (``aw_id`` → ``m_axi_awid``)."""
    return wiring.Signature({
        "aw_id": Out(8), "aw_addr": Out(64), "aw_len": Out(8), "aw_size": Out(3),
        "aw_burst": Out(2), "aw_valid": Out(1), "aw_ready": In(1),
        "w_data": Out(width), "w_strb": Out(width // 8), "w_last": Out(1),
        "w_valid": Out(1), "w_ready": In(1),
        "b_id": In(8), "b_resp": In(2), "b_valid": In(1), "b_ready": Out(1),
        "ar_id": Out(8), "ar_addr": Out(64), "ar_len": Out(8), "ar_size": Out(3),
        "ar_burst": Out(2), "ar_valid": Out(1), "ar_ready": In(1),
        "r_id": In(8), "r_data": In(width), "r_resp": In(2), "r_last": In(1),
        "r_valid": In(1), "r_ready": Out(1),
    })


def _round_robin(m, valids, last, name):
    """Combinational round-robin pick: the first valid after ``last`` (wrapping)."""
    n = len(valids)
    grant = Signal(range(max(n, 2)), name=f"{name}_grant")
    with m.Switch(last):
        for prev in range(n):
            with m.Case(prev):
                order = [(prev + 1 + k) % n for k in range(n)]
                for idx in reversed(order):        # later assignments win: order[0] first
                    with m.If(valids[idx]):
                        m.d.comb += grant.eq(idx)
    return grant


class _Splitter:
    """Per-client burst splitters and a round-robin arbiter feeding one address channel.

    Each client has its own small splitter (IDLE: take a request → CALC: the burst limit at
    this offset, min(beats to the page end, burst limit) → CALC2: the next burst's length and
    whether it is the request's last → READY). A client keeps only its request's 4 KiB page
    (the address bits above 12, loaded once), the beat offset inside the page, the beats left
    and the pages crossed so far (0..2: a request is at most 8191 bytes); no client has an
    adder wider than 15 bits. A READY client whose ``ok[i]`` holds (the caller's reservation
    conditions, computed from ``beats[i]``/``final[i]``) is a candidate; candidates are
    registered, and when the channel register is free the arbiter grants one round-robin
    (``fire``: the caller reserves for ``grant``), loads the channel register with the page and
    offset and that client goes on to its next burst. A burst in a page after the first gets
    its page number added in the next cycle by the one page adder of the channel (so only a
    burst after a page crossing takes a cycle more). A client that cannot reserve (for example
    a reader whose buffer is full) does not block the others.

    Registering the candidates is safe: a fire keeps the channel register busy for at least
    the next cycle, so the candidates used at the next possible fire were registered after the
    reservation of the last one.
    """

    def __init__(self, m, name, reqs, lb, max_beats):
        n = len(reqs)
        nb = max(n, 2)
        pb = PAGE >> lb                 # beats in a page
        ow = 12 - lb                    # width of the beat offset inside a page
        lim_max = min(pb, max_beats)
        lw = range((2 * PAGE >> lb) + 2)
        self.ok = [Signal(name=f"{name}_ok_{i}") for i in range(n)]              # in
        self.beats = [Signal(range(lim_max + 1), name=f"{name}_beats_{i}") for i in range(n)]
        self.final = [Signal(name=f"{name}_final_{i}") for i in range(n)]
        self.fire = Signal(name=f"{name}_fire")
        self.grant = Signal(range(nb), name=f"{name}_grant")
        self.g_beats = Signal(range(lim_max + 1), name=f"{name}_g_beats")
        self.g_final = Signal(name=f"{name}_g_final")
        self.g_tag = Signal(8, name=f"{name}_g_tag")
        self.handshake = Signal(name=f"{name}_hs")                                 # in
        # the address-channel register
        self.valid = Signal(name=f"{name}_valid")
        self.client = Signal(range(nb), name=f"{name}_client")
        self.addr = Signal(64, name=f"{name}_addr")
        self.len = Signal(8, name=f"{name}_len")

        ready, pages, offs, pcs, tags = [], [], [], [], []
        for i, r in enumerate(reqs):
            page = Signal(52, name=f"{name}_page_{i}")
            pc = Signal(2, name=f"{name}_pc_{i}")               # pages crossed so far
            off = Signal(ow, name=f"{name}_off_{i}")            # beat index inside the page
            left = Signal(lw, name=f"{name}_left_{i}")          # beats still to issue
            lim = Signal(range(lim_max + 1), name=f"{name}_lim_{i}")
            tag = Signal(8, name=f"{name}_tag_{i}")
            # beats of the request: ceil((addr % B + max(len, 1)) / B)
            ln = r.payload.len_bytes
            lenp = Cat(ln[0] | (ln == 0), ln[1:])
            nbeats = (r.payload.addr[:lb] + lenp + ((1 << lb) - 1)) >> lb
            new_off = Signal(ow + 1, name=f"{name}_new_off_{i}")
            m.d.comb += new_off.eq(off + self.beats[i])
            rdy = Signal(name=f"{name}_ready_{i}")
            ready.append(rdy)
            pages.append(page)
            offs.append(off)
            pcs.append(pc)
            tags.append(tag)
            granted = self.fire & (self.grant == i)
            # the limit at ``off``: the page end when it is nearer than the burst limit
            if max_beats >= pb:
                limit = pb - off
            else:
                limit = Mux(off >= pb - max_beats, pb - off, max_beats)
            with m.FSM(name=f"{name}_{i}"):
                with m.State("IDLE"):
                    m.d.comb += r.ready.eq(1)
                    # the request registers follow the input in every IDLE cycle (nothing reads
                    # them before CALC), so their enable is the state alone, not the client's
                    # valid logic a block away
                    m.d.sync += [
                        tag.eq(r.payload.tag), page.eq(r.payload.addr[12:]),
                        off.eq(r.payload.addr[lb:12]), left.eq(nbeats), pc.eq(0),
                    ]
                    with m.If(r.valid):
                        m.next = "CALC"
                with m.State("CALC"):
                    m.d.sync += lim.eq(limit)
                    m.next = "CALC2"
                with m.State("CALC2"):
                    m.d.sync += [
                        self.beats[i].eq(Mux(left <= lim, left, lim)),
                        self.final[i].eq(left <= lim),
                    ]
                    m.next = "READY"
                with m.State("READY"):
                    m.d.comb += rdy.eq(1)
                    with m.If(granted):
                        m.d.sync += [left.eq(left - self.beats[i]), off.eq(new_off[:ow]),
                                     pc.eq(pc + new_off[ow])]
                        m.next = "CALC"
                        with m.If(self.final[i]):
                            m.next = "IDLE"

        last = Signal(range(nb), name=f"{name}_last")
        cands = Signal(n, name=f"{name}_cands")
        m.d.sync += cands.eq(Cat(*(ready[i] & self.ok[i] for i in range(n))))
        m.d.comb += self.grant.eq(_round_robin(m, list(cands), last, name))
        inc = Signal(2, name=f"{name}_inc")                     # page add pending
        busy = Signal(name=f"{name}_busy")
        m.d.comb += busy.eq(self.valid | (inc != 0))
        g_page = Signal(52, name=f"{name}_g_page")
        g_off = Signal(ow, name=f"{name}_g_off")
        g_pc = Signal(2, name=f"{name}_g_pc")
        with m.Switch(self.grant):
            for i in range(n):
                with m.Case(i):
                    m.d.comb += [self.g_beats.eq(self.beats[i]), self.g_final.eq(self.final[i]),
                                 self.g_tag.eq(tags[i]), g_page.eq(pages[i]),
                                 g_off.eq(offs[i]), g_pc.eq(pcs[i])]
        m.d.comb += self.fire.eq(~busy & cands.any())
        with m.If(self.fire):
            m.d.sync += [self.valid.eq(g_pc == 0), inc.eq(g_pc), self.client.eq(self.grant),
                         last.eq(self.grant), self.len.eq(self.g_beats - 1),
                         self.addr.eq(Cat(Const(0, lb), g_off, g_page))]
        with m.Elif(inc != 0):
            m.d.sync += [self.addr[12:].eq(self.addr[12:] + inc), inc.eq(0), self.valid.eq(1)]
        with m.Elif(self.handshake):
            m.d.sync += self.valid.eq(0)


class HostMemory(wiring.Component):
    """AXI4 host-memory master shared by ``read_clients`` readers and ``write_clients`` writers.

    See the module docstring for the ID map, ordering and error rules.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512); ``AxSIZE`` is always log2(W/8).
    read_clients : int
        Number of read client ports (0..256).
    write_clients : int
        Number of write client ports (0..256).
    max_reads : int
        Read bursts outstanding at most (AR issued, last R beat not yet back).
    max_writes : int
        Write bursts outstanding at most (AW issued, B not yet back).
    read_buffer : int or sequence of int
        Response buffer per read client, in beats: one figure for every client, or one per
        client (``read_clients`` of them). Each must hold at least ``max_burst`` beats.
    max_burst : int or None
        Read burst length limit in beats (1..256); ``None``: ``min(256, smallest buffer)``.
    done_depth : int
        Completion buffer per write client.

    Attributes
    ----------
    axi : Out(AxiSignature(width))
        AXI4 master; ``axi.aw_id`` is Verilog ``m_axi_awid``, and so on.
    read_<i> : In(ReadClientSignature(width))
        Read client ``i``: ``req`` {addr 64, len_bytes 13, tag 8} in, ``resp`` beats
        {data W, last, tag 8, err} out, in request order.
    write_<j> : In(WriteClientSignature(width))
        Write client ``j``: ``req`` in, ``data`` beats {data W, strb W/8, last} in,
        ``done`` {tag 8, err} out, in request order.

    The lists ``read_ports`` and ``write_ports`` hold the same client interfaces by index.
    """

    def __init__(self, *, width=64, read_clients=1, write_clients=1, max_reads=4, max_writes=4,
                 read_buffer=64, max_burst=None, done_depth=2):
        check_width(width)
        for name, v, lo, hi in (("read_clients", read_clients, 0, 256),
                                ("write_clients", write_clients, 0, 256),
                                ("max_reads", max_reads, 1, 256),
                                ("max_writes", max_writes, 1, 256),
                                ("done_depth", done_depth, 1, 256)):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, not {v!r}")
        bufs = [read_buffer] * read_clients if isinstance(read_buffer, int) else list(read_buffer)
        if len(bufs) != read_clients:
            raise ValueError(f"read_buffer has {len(bufs)} figures for {read_clients} read "
                             f"clients")
        for v in bufs:
            if not isinstance(v, int) or not 1 <= v <= 1 << 16:
                raise ValueError(f"read_buffer must be integers in 1..65536, not {v!r}")
        if max_burst is None:
            max_burst = min([MAX_AXI_BEATS] + bufs)
        if not isinstance(max_burst, int) or not 1 <= max_burst <= MAX_AXI_BEATS:
            raise ValueError(f"max_burst must be an integer in 1..{MAX_AXI_BEATS}, "
                             f"not {max_burst!r}")
        if bufs and max_burst > min(bufs):
            raise ValueError(f"max_burst ({max_burst}) exceeds the smallest read_buffer "
                             f"({min(bufs)}): such a client's bursts could never issue")
        self.width = width
        self.read_clients = read_clients
        self.write_clients = write_clients
        self.max_reads = max_reads
        self.max_writes = max_writes
        self.read_buffer = bufs
        self.max_burst = max_burst
        self.done_depth = done_depth
        members = {"axi": Out(AxiSignature(width))}
        for i in range(read_clients):
            members[f"read_{i}"] = In(ReadClientSignature(width))
        for j in range(write_clients):
            members[f"write_{j}"] = In(WriteClientSignature(width))
        super().__init__(members)
        self.read_ports = [getattr(self, f"read_{i}") for i in range(read_clients)]
        self.write_ports = [getattr(self, f"write_{j}") for j in range(write_clients)]

    def elaborate(self, platform):
        m = Module()
        W = self.width
        lb = (W // 8).bit_length() - 1
        axi = self.axi
        m.d.comb += [
            axi.aw_size.eq(lb), axi.ar_size.eq(lb),
            axi.aw_burst.eq(1), axi.ar_burst.eq(1),      # INCR
            axi.r_ready.eq(1), axi.b_ready.eq(1),
        ]
        self._elaborate_reads(m, lb)
        self._elaborate_writes(m, lb)
        return m

    def _elaborate_reads(self, m, lb):
        R = self.read_clients
        if R == 0:
            return
        axi = self.axi
        W = self.width
        max_beats = self.max_burst
        bufs = self.read_buffer
        # one block RAM of every client's response buffer: client i owns a region of
        # read_buffer[i] beats. Largest first: power-of-two regions then sit at aligned bases
        # and a region address is its base bits and the pointer, without an adder.
        base, top = [0] * R, 0
        for i in sorted(range(R), key=lambda i: -bufs[i]):
            base[i], top = top, top + bufs[i]
        aw = max(top - 1, 1).bit_length()
        m.submodules.rbuf = rbuf = Memory(shape=W + 2, depth=top, init=[])
        wp = rbuf.write_port()
        rp = rbuf.read_port(transparent_for=())

        def region(i, ptr):
            size = bufs[i]
            if size & (size - 1) == 0 and base[i] % size == 0:
                return Cat(ptr[:(size - 1).bit_length()], Const(base[i] >> (size - 1).bit_length(),
                                                                aw - (size - 1).bit_length()))
            return (base[i] + ptr)[:aw]

        def incr(ptr, size):
            return (ptr + 1)[:len(ptr)] if size == 1 << len(ptr) else Mux(ptr == size - 1, 0,
                                                                         ptr + 1)

        # per burst {tag, final} from the grant until the client has taken its last beat
        mdepth = max(16, self.max_reads)
        metas, credits = [], []
        sp = _Splitter(m, "ar", [p.req for p in self.read_ports], lb, max_beats)
        outstanding = Signal(range(self.max_reads + 1), name="reads_outstanding")
        retire = Signal()
        # the read issued in the last cycle: its word is on the RAM's output now
        pend = Signal(name="rd_pend")
        pend_client = Signal(range(max(R, 2)), name="rd_pend_client")
        rd_last = Signal(range(max(R, 2)), name="rd_last")
        wants, raddrs = [], []
        for i, port in enumerate(self.read_ports):
            size = bufs[i]
            meta = Queue(_meta_layout, mdepth, buffered=False)
            m.submodules[f"rmeta_{i}"] = meta
            metas.append(meta)
            credit = Signal(range(size + 1), init=size, name=f"rcredit_{i}")
            credits.append(credit)
            wptr = Signal(range(size), name=f"rwptr_{i}")
            rptr = Signal(range(size), name=f"rrptr_{i}")
            cnt = Signal(range(size + 1), name=f"rcnt_{i}")      # in the RAM, not yet out
            o_valid = Signal(name=f"ro_valid_{i}")
            o_word = Signal(W + 2, name=f"ro_word_{i}")          # {data, burst end, err}
            hit = axi.r_valid & (axi.r_id == i)
            with m.If(hit):
                m.d.comb += [wp.en.eq(1), wp.addr.eq(region(i, wptr))]
                m.d.sync += wptr.eq(incr(wptr, size))
                m.d.comb += retire.eq(axi.r_last)
            taken = o_valid & port.resp.ready
            land = Signal(name=f"rland_{i}")
            m.d.comb += land.eq(pend & (pend_client == i) & (~o_valid | port.resp.ready))
            with m.If(land):
                m.d.sync += [o_word.eq(rp.data), o_valid.eq(1), rptr.eq(incr(rptr, size))]
            with m.Elif(taken):
                m.d.sync += o_valid.eq(0)
            m.d.sync += cnt.eq(cnt + hit - land)
            # read the next word when there is one beyond the word landing now and the output
            # register is free or being taken (a client that holds its beat is not read for)
            want = Signal(name=f"rwant_{i}")
            m.d.comb += want.eq(Mux(land, cnt >= 2, cnt != 0) & (~o_valid | port.resp.ready))
            wants.append(want)
            raddrs.append(region(i, Mux(land, incr(rptr, size), rptr)))
            m.d.comb += [
                port.resp.valid.eq(o_valid),
                port.resp.payload.data.eq(o_word[:W]),
                port.resp.payload.err.eq(o_word[W + 1]),
                port.resp.payload.tag.eq(meta.o.payload.tag),
                port.resp.payload.last.eq(o_word[W] & meta.o.payload.final),
                meta.o.ready.eq(taken & o_word[W]),
            ]
            mine = sp.fire & (sp.grant == i)
            m.d.comb += [
                meta.i.valid.eq(mine),
                meta.i.payload.tag.eq(sp.g_tag),
                meta.i.payload.final.eq(sp.g_final),
                sp.ok[i].eq((credit >= sp.beats[i]) & meta.i.ready
                            & (outstanding < self.max_reads)),
            ]
            m.d.sync += credit.eq(credit - Mux(mine, sp.g_beats, 0) + taken)
        m.d.comb += [wp.data.eq(Cat(axi.r_data, axi.r_last, axi.r_resp != 0))]
        sel = _round_robin(m, wants, rd_last, "rd")
        m.d.sync += [pend.eq(Cat(*wants).any()), pend_client.eq(sel)]
        with m.If(Cat(*wants).any()):
            m.d.sync += rd_last.eq(sel)
        with m.Switch(sel):
            for i in range(R):
                with m.Case(i):
                    m.d.comb += rp.addr.eq(raddrs[i])
        m.d.comb += [
            sp.handshake.eq(sp.valid & axi.ar_ready),
            axi.ar_valid.eq(sp.valid),
            axi.ar_id.eq(sp.client),
            axi.ar_addr.eq(sp.addr),
            axi.ar_len.eq(sp.len),
        ]
        m.d.sync += outstanding.eq(outstanding + sp.fire - retire)

    def _elaborate_writes(self, m, lb):
        C = self.write_clients
        if C == 0:
            return
        axi = self.axi
        max_beats = MAX_AXI_BEATS
        metas, dones, dcredits, errs = [], [], [], []
        for j, port in enumerate(self.write_ports):
            meta = Queue(_meta_layout, self.max_writes, buffered=False)
            done = Queue(done_layout, self.done_depth, buffered=False)
            m.submodules[f"wmeta_{j}"] = meta
            m.submodules[f"wdone_{j}"] = done
            wiring.connect(m, done.o, wiring.flipped(port.done))
            metas.append(meta)
            dones.append(done)
            dcredits.append(Signal(range(self.done_depth + 1), init=self.done_depth,
                                   name=f"dcredit_{j}"))
            errs.append(Signal(name=f"werr_{j}"))

        job_layout = data.StructLayout({"client": range(max(C, 2)), "beats": range(257)})
        m.submodules.wjobs = jobs = Queue(job_layout, self.max_writes, buffered=False)

        sp = _Splitter(m, "aw", [p.req for p in self.write_ports], lb, max_beats)
        outstanding = Signal(range(self.max_writes + 1), name="writes_outstanding")
        for j in range(C):
            m.d.comb += sp.ok[j].eq(metas[j].i.ready & (~sp.final[j] | (dcredits[j] != 0))
                                    & jobs.i.ready & (outstanding < self.max_writes))
        m.d.comb += [
            sp.handshake.eq(sp.valid & axi.aw_ready),
            axi.aw_valid.eq(sp.valid),
            axi.aw_id.eq(sp.client),
            axi.aw_addr.eq(sp.addr),
            axi.aw_len.eq(sp.len),
            jobs.i.valid.eq(sp.fire),
            jobs.i.payload.client.eq(sp.grant),
            jobs.i.payload.beats.eq(sp.g_beats),
        ]

        # B: retire bursts, complete requests
        retire = Signal()
        for j in range(C):
            hit = axi.b_valid & (axi.b_id == j)
            mine = sp.fire & (sp.grant == j)
            final = metas[j].o.payload.final
            bad = axi.b_resp != 0
            m.d.comb += [
                metas[j].i.valid.eq(mine),
                metas[j].i.payload.tag.eq(sp.g_tag),
                metas[j].i.payload.final.eq(sp.g_final),
                metas[j].o.ready.eq(hit),
                dones[j].i.valid.eq(hit & final),
                dones[j].i.payload.tag.eq(metas[j].o.payload.tag),
                dones[j].i.payload.err.eq(errs[j] | bad),
            ]
            with m.If(hit):
                m.d.comb += retire.eq(1)
                m.d.sync += errs[j].eq(Mux(final, 0, errs[j] | bad))
            popped = dones[j].o.valid & dones[j].o.ready
            m.d.sync += dcredits[j].eq(dcredits[j] - (mine & sp.g_final) + popped)
        m.d.sync += outstanding.eq(outstanding + sp.fire - retire)

        # W: forward each burst's beats from its client
        active = Signal()
        wclient = Signal(range(max(C, 2)))
        count = Signal(range(257))
        w_end = Signal()
        with m.If(active):
            with m.Switch(wclient):
                for j, port in enumerate(self.write_ports):
                    with m.Case(j):
                        m.d.comb += [
                            axi.w_valid.eq(port.data.valid),
                            axi.w_data.eq(port.data.payload.data),
                            axi.w_strb.eq(port.data.payload.strb),
                            port.data.ready.eq(axi.w_ready),
                        ]
            m.d.comb += axi.w_last.eq(count == 0)
            m.d.comb += w_end.eq(axi.w_valid & axi.w_ready & (count == 0))
            with m.If(axi.w_valid & axi.w_ready):
                m.d.sync += count.eq(count - 1)
                with m.If(count == 0):
                    m.d.sync += active.eq(0)
        # a burst's last beat and the next job's pop share a cycle (no bubble between bursts)
        with m.If(~active | w_end):
            m.d.comb += jobs.o.ready.eq(1)
            with m.If(jobs.o.valid):
                m.d.sync += [active.eq(1), wclient.eq(jobs.o.payload.client),
                             count.eq(jobs.o.payload.beats - 1)]

