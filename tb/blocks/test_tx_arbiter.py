"""TX arbiter against a model: whole descriptors, exactly once and in order per source, withdrawn
descriptors never sent, a waiting source served after at most one frame of the other, a lone source
every other cycle, both sources alternating every cycle; the gather chunks of both sources routed to
``chunk`` in grant order, each exactly once, and no frame with payload passed while ``depth`` of
them wait for their chunks, header-only ones still passing (Amaranth-style testbenches on the
Verilog, one testbench driving and checking every cycle)."""
import gc
import random
import warnings

import pytest

from rnic.tx.arbiter import TxArbiter
from rnic.tx.build import chunk_layout, pkt_layout
from sim.vsim import Simulator

PKT_FIELDS = [name for name, _ in pkt_layout]
CHUNK_FIELDS = [name for name, _ in chunk_layout]
SRCS = ("resp", "req")


def _chunks(rng, paylen, most):
    """A frame's gather chunks: 1..most lengths summing to ``paylen``, random addresses."""
    if paylen == 0:
        return []
    n = rng.randint(1, min(most, paylen))
    cuts = sorted(rng.sample(range(1, paylen), n - 1))
    lens = [b - a for a, b in zip([0] + cuts, cuts + [paylen])]
    return [{"addr": rng.getrandbits(64), "len": n} for n in lens]


def _resp(rng, i, p_pay):
    """An ACK/NAK (no payload) or a READ response (payload, one chunk)."""
    if rng.random() >= p_pay:
        d = {"qpn": i, "opcode": 0x11, "se": 0, "ackreq": 0, "psn": rng.getrandbits(24),
             "aeth": 1, "syndrome": rng.getrandbits(8), "msn": rng.getrandbits(24), "paylen": 0}
    else:
        d = {"qpn": i, "opcode": rng.choice((0x0D, 0x0E, 0x0F, 0x10)), "se": 0, "ackreq": 0,
             "psn": rng.getrandbits(24), "aeth": 1, "syndrome": 0x1F,
             "msn": rng.getrandbits(24), "paylen": rng.randint(1, 4096)}
    d.update({f: 0 for f in PKT_FIELDS if f not in d})
    return d, _chunks(rng, d["paylen"], 1)


def _req(rng, i, p_pay, most):
    d = {"opcode": rng.choice((0x04, 0x06, 0x0A)), "se": rng.getrandbits(1),
         "ackreq": rng.getrandbits(1), "psn": rng.getrandbits(24), "va": rng.getrandbits(64),
         "rkey": rng.getrandbits(32), "dmalen": rng.getrandbits(32),
         "imm": rng.getrandbits(32), "qpn": 0x1000 + i,
         "paylen": rng.randint(1, 4096) if rng.random() < p_pay else 0,
         # a request's AETH fields are sent as 0
         "aeth": 1, "syndrome": 0x5A, "msn": 7}
    return d, _chunks(rng, d["paylen"], most)


#: the fields that pass from each source; the others on ``o`` are the other source's (a
#: responder frame has no RETH or IMMDT/IETH, a request frame no AETH: the builder ignores them)
_CARRIED = {"resp": ("opcode", "se", "ackreq", "psn", "paylen", "qpn", "aeth", "syndrome", "msn"),
            "req": ("opcode", "se", "ackreq", "psn", "paylen", "qpn", "aeth", "va", "rkey",
                    "dmalen", "imm")}


def _expected(src, d):
    """The builder descriptor fields the arbiter passes for ``d`` from ``src``."""
    out = {f: d[f] for f in _CARRIED[src]}
    if src == "req":
        out.update(aeth=0)
    return out


class _Bench:
    """The state of one :func:`_simulate` run: what each source offers, what passed and what
    is still expected, per cycle; every random choice from ``rng`` in a fixed order."""

    def __init__(self, rng, dut, items, *, stall_resp, stall_req, stall_chunk, chunk_hold, depth):
        self.rng, self.dut, self.items = rng, dut, items
        self.stall = {"resp": stall_resp, "req": stall_req}
        self.stall_chunk, self.chunk_hold, self.depth = stall_chunk, chunk_hold, depth
        self.port = {"resp": dut.resp, "req": dut.req}
        self.cport = {"resp": dut.resp_chunk, "req": dut.req_chunk}
        self.nxt = {s: 0 for s in SRCS}          # index of the item offered (or to offer)
        self.offering = {s: False for s in SRCS}
        self.other_sent = {s: 0 for s in SRCS}   # frames of the other source since this offer
        self.sent = {s: [] for s in SRCS}        # indices passed, in order
        self.withdrawn = {s: [] for s in SRCS}
        self.cool = {s: False for s in SRCS}     # withdrawn in the last cycle: valid stays low
        self.pending = {s: [] for s in SRCS}     # chunks of passed frames not offered or taken
        self.coffer = {s: False for s in SRCS}
        self.expect = []                    # (source, chunk) in grant order, not yet routed
        self.routed = []                    # (source, chunk) as routed
        self.open_frames = []               # [chunks not yet routed] per frame with payload
        self.trace = []                     # per cycle: the source that passed a frame, or None
        self.offers = []                    # per cycle: which sources offered a descriptor that
        #                                     could pass (no payload, or the frame queue not full)

    def drive(self, ctx, cyc, full):
        """Offer descriptors and chunks; returns which sources' offers could pass."""
        rng, items = self.rng, self.items
        for s in SRCS:
            if not self.offering[s] and not self.cool[s] and self.nxt[s] < len(items[s]) and \
                    rng.random() >= self.stall[s]:
                self.offering[s] = True
                self.other_sent[s] = 0
                for f in PKT_FIELDS:
                    ctx.set(self.port[s].payload[f], items[s][self.nxt[s]][0][f])
            ctx.set(self.port[s].valid, self.offering[s])
            if not self.coffer[s] and self.pending[s] and cyc >= self.chunk_hold and \
                    rng.random() >= self.stall_chunk:
                self.coffer[s] = True
                for f in CHUNK_FIELDS:
                    ctx.set(self.cport[s].payload[f], self.pending[s][0][f])
            ctx.set(self.cport[s].valid, self.coffer[s])
        eligible = {s: self.offering[s] and not (full and items[s][self.nxt[s]][0]["paylen"])
                    for s in SRCS}
        for s in SRCS:
            if self.offering[s] and not eligible[s]:
                self.other_sent[s] = 0       # the bound counts from when it can pass
        return eligible

    def chunk_taken(self, ctx, s):
        """A chunk of ``s`` routed: the next one of the frames in grant order."""
        out = {f: ctx.get(self.dut.chunk.payload[f]) for f in CHUNK_FIELDS}
        c = self.pending[s].pop(0)
        assert out == c
        assert self.expect and self.expect[0] == (s, c), ("chunk out of grant order", s, c)
        self.routed.append(self.expect.pop(0))
        self.coffer[s] = False
        self.open_frames[0] -= 1
        if not self.open_frames[0]:
            self.open_frames.pop(0)

    def frame_taken(self, ctx, s, full):
        """A descriptor of ``s`` passed: the one offered, within the round-robin bound."""
        nxt = self.nxt
        d, chunks = self.items[s][nxt[s]]
        out = {f: ctx.get(self.dut.o.payload[f]) for f in _CARRIED[s]}
        assert out == _expected(s, d), (s, nxt[s])
        # round robin: a waiting source goes after at most one frame of the other
        assert self.other_sent[s] <= 1, (s, nxt[s], self.other_sent[s])
        self.sent[s].append(nxt[s])
        self.pending[s] += chunks
        self.expect.extend((s, c) for c in chunks)
        assert not (full and chunks), "a frame with payload passed a full queue"
        if chunks:
            self.open_frames.append(len(chunks))
        nxt[s] += 1
        self.offering[s] = False
        o = "req" if s == "resp" else "resp"
        if self.offering[o]:
            self.other_sent[o] += 1

    def sample(self, ctx, full):
        """Check this cycle's transfers; returns the sources whose descriptor passed."""
        dut = self.dut
        took = [s for s in SRCS if self.offering[s] and ctx.get(self.port[s].ready)]
        assert len(took) <= 1
        assert bool(took) == bool(ctx.get(dut.o.valid) and ctx.get(dut.o.ready))
        ctook = [s for s in SRCS if self.coffer[s] and ctx.get(self.cport[s].ready)]
        assert len(ctook) <= 1
        assert bool(ctook) == bool(ctx.get(dut.chunk.valid) and ctx.get(dut.chunk.ready))
        if ctook:
            self.chunk_taken(ctx, ctook[0])
        if took:
            self.frame_taken(ctx, took[0], full)
        return took

    def withdraw(self, took, p):
        """A source may withdraw a descriptor not taken: offered again later, or (half the
        time) never; valid is then low for at least a cycle."""
        for s in SRCS:
            self.cool[s] = False
            if self.offering[s] and took != [s] and self.rng.random() < p:
                self.offering[s] = False
                self.cool[s] = True
                if self.rng.random() < 0.5:
                    self.withdrawn[s].append(self.nxt[s])
                    self.nxt[s] += 1


def _simulate(seed, n_resp, n_req, *, stall_resp, stall_req, withdraw, ready_p, cycles,
              p_pay=0.5, most=3, stall_chunk=0.3, chunk_ready_p=0.7, chunk_hold=0, depth=4):
    """Drive both sources, their chunks and both outputs for ``cycles`` cycles; check every
    transfer against the model; return what was sent, per source, and the transfer trace.
    ``chunk_hold``: no chunk is offered before that cycle."""
    rng = random.Random(seed)
    dut = TxArbiter(depth=depth)
    items = {"resp": [_resp(rng, i, p_pay) for i in range(n_resp)],
             "req": [_req(rng, i, p_pay, most) for i in range(n_req)]}
    b = _Bench(rng, dut, items, stall_resp=stall_resp, stall_req=stall_req,
               stall_chunk=stall_chunk, chunk_hold=chunk_hold, depth=depth)

    async def bench(ctx):
        for cyc in range(cycles):
            full = len(b.open_frames) >= depth
            eligible = b.drive(ctx, cyc, full)
            ctx.set(dut.o.ready, rng.random() < ready_p)
            ctx.set(dut.chunk.ready, rng.random() < chunk_ready_p)
            await ctx.delay(1e-10)
            took = b.sample(ctx, full)
            b.trace.append(took[0] if took else None)
            b.offers.append(eligible)
            await ctx.tick()
            b.withdraw(took, withdraw)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    _check_round_robin(b.trace, b.offers)
    return {"items": items, "sent": b.sent, "withdrawn": b.withdrawn, "trace": b.trace,
            "routed": b.routed, "expect": b.expect}


def _check_round_robin(trace, offers):
    """When a source passes two frames in a row, the other did not offer one all along from the
    first, nor from the first cycle after it in which anything was offered: it would have been
    granted first (the grant goes to the source not served last). A source that withdraws its
    offer in between has the grant picked again, so only unbroken offers count."""
    passed = [t for t, s in enumerate(trace) if s]
    for t1, t2 in zip(passed, passed[1:]):
        s = trace[t1]
        if trace[t2] != s:
            continue
        o = "req" if s == "resp" else "resp"
        tg = next((t for t in range(t1 + 1, t2) if offers[t]["resp"] or offers[t]["req"]), t2)
        # (unless the other withdrew its offer in between: the grant is then picked again)
        assert not all(offers[t][o] for t in range(t1, t2 + 1)), (t1, t2, s)
        if all(offers[t][o] for t in range(tg, t2 + 1)):
            assert tg == t2, (t1, t2, tg, s)


def _all_chunks(r, s):
    return [(s, c) for k in r["sent"][s] for c in r["items"][s][k][1]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_traffic(seed):
    """Random valid, ready and withdrawals on both sources, frames with and without payload:
    every descriptor not withdrawn for good once, in order; no withdrawn one sent; every chunk
    of every frame passed routed once, in grant order (checked as it passes)."""
    r = _simulate(seed, 150, 150, stall_resp=0.4, stall_req=0.4, withdraw=0.15, ready_p=0.7,
                  cycles=5000)
    for s in SRCS:
        assert r["sent"][s] == [i for i in range(150) if i not in r["withdrawn"][s]]
        assert r["withdrawn"][s] and not set(r["withdrawn"][s]) & set(r["sent"][s])
    assert not r["expect"], "chunks left unrouted"
    assert sorted(map(repr, r["routed"])) == sorted(
        map(repr, _all_chunks(r, "resp") + _all_chunks(r, "req")))
    # the frames of the two sources did interleave, several chunks per request frame too
    assert sum(1 for a, b in zip(r["routed"], r["routed"][1:]) if a[0] != b[0]) > 50
    assert any(len(r["items"]["req"][k][1]) == 3 for k in r["sent"]["req"])


def test_both_waiting_alternate_every_cycle():
    """Both sources always valid, output always ready: one frame a cycle, alternating (chunks
    taken as they come)."""
    r = _simulate(4, 40, 40, stall_resp=0, stall_req=0, withdraw=0, ready_p=1, cycles=60,
                  p_pay=0.3, most=1, stall_chunk=0, chunk_ready_p=1)
    passed = [s for s in r["trace"] if s]
    assert len(passed) >= 58
    assert all(a != b for a, b in zip(passed, passed[1:]))


@pytest.mark.parametrize("src", SRCS)
def test_lone_source_every_other_cycle(src):
    """One source always valid, the other idle: one frame every other cycle, no faster (the
    responder, parked on after reset, passes its first in cycle 0, the requester in cycle 1)."""
    n = (40, 0) if src == "resp" else (0, 40)
    r = _simulate(5, *n, stall_resp=0, stall_req=0, withdraw=0, ready_p=1, cycles=41,
                  p_pay=0.5, most=1, stall_chunk=0, chunk_ready_p=1)
    assert len(r["sent"][src]) == (21 if src == "resp" else 20)
    assert r["trace"][0 if src == "resp" else 1] == src
    assert all(not (a and b) for a, b in zip(r["trace"], r["trace"][1:]))


@pytest.mark.parametrize("depth", [1, 4])
def test_chunk_queue_full(depth):
    """No chunk is offered for 300 cycles: exactly ``depth`` frames with payload pass, header-only
    frames of either source go on passing until the source's next frame has payload; once chunks
    come, everything drains in grant order."""
    r = _simulate(6, 60, 60, stall_resp=0.2, stall_req=0.2, withdraw=0, ready_p=0.9,
                  cycles=1500, p_pay=0.5, most=2, chunk_hold=300, depth=depth)
    items, sent, trace = r["items"], r["sent"], r["trace"]
    seq = []                 # per cycle up to 300: (source, item) passed
    counts = {s: 0 for s in SRCS}
    for t in range(300):
        s = trace[t]
        if s:
            seq.append((s, sent[s][counts[s]]))
            counts[s] += 1
    with_pay = [x for x in seq if items[x[0]][x[1]][0]["paylen"]]
    assert len(with_pay) == depth, with_pay
    # each source stopped at a frame with payload: its header-only frames before it all passed
    for s in SRCS:
        assert items[s][counts[s]][0]["paylen"], (s, counts[s])
    assert len(seq) > depth
    for s in SRCS:
        assert sent[s] == list(range(60))
    assert not r["expect"]
    assert len(r["routed"]) == sum(len(items[s][k][1]) for s in SRCS for k in sent[s])


def test_parameters_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # the refused instances are never elaborated
        for depth in (0, 17, 2.0):
            with pytest.raises(ValueError):
                TxArbiter(depth=depth)
        gc.collect()


def test_parked_source_passes_at_once():
    """Parking: with no grant, a descriptor of the source served last passes in the cycle it is
    offered while the frame queue is empty; the other source's waits for its grant a cycle; a
    parked frame without payload takes no chunk (the next frame's chunk goes to it), and with
    a frame waiting for its chunk the parked source waits for a grant."""
    dut = TxArbiter(depth=4)

    def offer(ctx, port, **f):
        d = {k: 0 for k in PKT_FIELDS} | f
        for k in PKT_FIELDS:
            ctx.set(port.payload[k], d[k])
        ctx.set(port.valid, 1)

    async def until_taken(ctx, port):
        """Cycles from now until ``port``'s descriptor passes (0: this cycle)."""
        for n in range(10):
            await ctx.delay(1e-10)
            if ctx.get(port.valid) and ctx.get(port.ready):
                await ctx.tick()
                ctx.set(port.valid, 0)
                return n
            await ctx.tick()
        raise AssertionError("not taken")

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.chunk.ready, 1)
        for _ in range(3):
            await ctx.tick()
        # the responder, parked on after reset: at once (an ACK, no payload)
        offer(ctx, dut.resp, opcode=0x11, aeth=1, qpn=1)
        assert await until_taken(ctx, dut.resp) == 0
        for _ in range(3):
            await ctx.tick()
        # again at once (served last), now with payload; its chunk routed the cycle after
        offer(ctx, dut.resp, opcode=0x10, aeth=1, qpn=2, paylen=64)
        assert await until_taken(ctx, dut.resp) == 0
        ctx.set(dut.resp_chunk.payload.addr, 0x1000)
        ctx.set(dut.resp_chunk.payload.len, 64)
        ctx.set(dut.resp_chunk.valid, 1)
        await ctx.delay(1e-10)
        assert ctx.get(dut.chunk.valid) and ctx.get(dut.chunk.payload.addr) == 0x1000
        await ctx.tick()
        ctx.set(dut.resp_chunk.valid, 0)
        for _ in range(3):
            await ctx.tick()
        # the requester, not parked on: a cycle later
        offer(ctx, dut.req, opcode=0x04, qpn=3)
        assert await until_taken(ctx, dut.req) == 1
        for _ in range(3):
            await ctx.tick()
        # both at once: the requester, parked on (served last), then the responder
        offer(ctx, dut.resp, opcode=0x11, aeth=1, qpn=4)
        offer(ctx, dut.req, opcode=0x04, qpn=5)
        await ctx.delay(1e-10)
        assert ctx.get(dut.req.ready) and not ctx.get(dut.resp.ready)
        await ctx.tick()
        ctx.set(dut.req.valid, 0)
        assert await until_taken(ctx, dut.resp) == 0
        for _ in range(3):
            await ctx.tick()
        # a request with payload whose chunk does not come yet, then a responder ACK: the
        # frame queue is not empty, so the ACK waits for its grant; the request's chunk is
        # then routed, and the next request's
        offer(ctx, dut.req, opcode=0x04, qpn=6, paylen=8)
        assert await until_taken(ctx, dut.req) == 1
        offer(ctx, dut.resp, opcode=0x11, aeth=1, qpn=7)
        assert await until_taken(ctx, dut.resp) == 1     # parked on, but a frame waits
        offer(ctx, dut.req, opcode=0x04, qpn=8, paylen=4)
        assert await until_taken(ctx, dut.req) == 1
        for addr, ln in ((0x2000, 8), (0x3000, 4)):
            ctx.set(dut.req_chunk.payload.addr, addr)
            ctx.set(dut.req_chunk.payload.len, ln)
            ctx.set(dut.req_chunk.valid, 1)
            await ctx.delay(1e-10)
            assert ctx.get(dut.chunk.valid) and ctx.get(dut.chunk.payload.addr) == addr
            await ctx.tick()
            ctx.set(dut.req_chunk.valid, 0)
        await ctx.delay(1e-10)
        assert not ctx.get(dut.chunk.valid)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
