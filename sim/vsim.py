"""Amaranth-style testbenches run on the generated Verilog.

:class:`Simulator` takes the place of ``amaranth.sim.Simulator`` in the block tests written in
Amaranth's testbench style: ``add_clock``, ``add_testbench`` (``background``), ``add_process``,
``run``, ``run_until`` and ``write_vcd``, and a context with ``get``, ``set``, ``tick()`` (awaited,
``sample``, ``until``, ``repeat``, ``async for``) and ``delay``. The design it runs is not the
Amaranth netlist but the Verilog that :func:`rnic.emit.verilog` writes for the component (ports
named by :func:`sim.wrap.flat_top`), simulated by cocotb on Icarus (or Verilator, ``RNIC_SIM``),
so these tests too simulate exactly the Verilog the core is built from.

The testbenches run in the pytest process; the simulator process obeys them over a local
connection (``sim.vsim_cocotb``). One cycle: the inputs set are applied and settled, the
``sample`` expressions are read, the clock rises, the design settles. Processes
(``add_process``) resume after the edge before the testbenches, as in Amaranth.

What it does not do (each raises with the signal named): read or drive a signal that is not a
port of the component; evaluate operators (expressions are signals, slices, concatenations and
constants); a ``delay`` that reaches the next clock edge (a delay only settles the design).
Reset is held low: registers start at their initial values, as in Amaranth's simulator. A value
read with X or Z bits is an :class:`Undefined`: any use of it fails the test (a payload sampled
while its ``valid`` is low and never looked at is not an error, as at the core's ports).
"""

import contextlib
import hashlib
import os
import secrets
import threading
import traceback
from multiprocessing.connection import Listener

from amaranth.hdl import Const, Module, ShapeCastable, Value, ValueCastable
from amaranth.hdl._ast import Concat, Signal, Slice
from amaranth.lib.wiring import Flow

from .runner import BUILD, ROOT, _check_results, _Lock, simulator_default, verilator_env
from .wrap import flat_top

__all__ = ["Simulator", "ports_of"]

_MODULE = "sim.vsim_cocotb"


def _mask(w):
    return (1 << w) - 1


def _chunks(value):
    """``value`` (a signal, or slices of one) as ``[(signal, start, stop)]``, LSB first."""
    value = Value.cast(value)
    if isinstance(value, Signal):
        return [(value, 0, len(value))]
    if isinstance(value, Slice):
        out, pos = [], 0
        for sig, a, b in _chunks(value.value):
            lo, hi = max(a, a + value.start - pos), min(b, a + value.stop - pos)
            if lo < hi:
                out.append((sig, lo, hi))
            pos += b - a
        return out
    if isinstance(value, Concat):
        return [c for part in value.parts for c in _chunks(part)]
    raise TypeError(f"{value!r}: only signals, slices and concatenations are ports here")


def ports_of(*interfaces):
    """``(inputs, outputs)``: the leaf values of interfaces of components inside a design, as
    :class:`Simulator`'s ``inputs`` and ``outputs`` of that design (the members the component
    drives are outputs). A member that something else in the design drives must be moved to
    the outputs by the caller."""
    ins, outs = [], []

    def walk(sig, obj):
        for name, member in sig.members.items():
            todo = [getattr(obj, name)]
            for _ in member.dimensions:
                todo = [x for t in todo for x in t]
            for inner in todo:
                if member.is_port:
                    (ins if member.flow == Flow.In else outs).append(inner)
                else:
                    walk(member.signature, inner)

    for iface in interfaces:
        walk(iface.signature, iface)
    return ins, outs


class Undefined:
    """A value read with X or Z bits: any use of it (compare, arithmetic, truth) fails."""

    def __init__(self, expr, xmask):
        self._what = f"{expr!r} has X or Z bits (mask {xmask:#x})"

    def _fail(self, *args):
        raise AssertionError(f"X on a port: {self._what}")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _fail
    __bool__ = __int__ = __index__ = __float__ = _fail
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __mod__ = __floordiv__ = _fail

    def __repr__(self):
        return f"<undefined: {self._what}>"


def _shaped(expr, value):
    """``value`` read from ``expr`` as Amaranth returns it (a view's constant for a view)."""
    if isinstance(expr, ValueCastable):
        shape = expr.shape()
        if isinstance(shape, ShapeCastable):
            if isinstance(value, Undefined):
                value._fail()
            return shape.from_bits(value)
    return value


class _Tick:
    """``ctx.tick()``: awaited, it returns ``(clk, rst, *samples)`` after the next rising edge."""

    def __init__(self, sim, samples=()):
        self._sim, self._samples = sim, tuple(samples)

    def sample(self, *exprs):
        return _Tick(self._sim, self._samples + exprs)

    def __await__(self):
        values = yield ("tick", self._samples)
        return (1, 0, *values)

    async def until(self, condition):
        while True:
            _, _, *values, done = await self.sample(condition)
            if done:
                return tuple(values)

    async def repeat(self, count):
        if count < 1:
            raise ValueError(f"Repeat count must be a positive integer, not {count!r}")
        for _ in range(count):
            _, _, *values = await self
        return tuple(values)

    async def __aiter__(self):
        while True:
            yield await self


class _Delay:
    def __init__(self, seconds):
        self.seconds = seconds

    def __await__(self):
        yield ("delay", self.seconds)


class _Context:
    def __init__(self, sim):
        self._sim = sim

    def get(self, expr):
        return _shaped(expr, self._sim._eval(expr))

    def set(self, expr, value):
        if isinstance(expr, ValueCastable):
            shape = expr.shape()
            if isinstance(shape, ShapeCastable):
                value = shape.const(value)
        self._sim._assign(expr, Const.cast(value).value)

    def tick(self, domain="sync"):
        if domain != "sync":
            raise ValueError("only the sync domain is simulated")
        return _Tick(self._sim)

    def delay(self, interval):
        return _Delay(interval)


class Simulator:
    """``amaranth.sim.Simulator``'s API over the generated Verilog of ``design``.

    A ``wiring.Component`` is simulated with its signature as its ports. Any other elaboratable
    (a test's pair of blocks side by side, say) names the values that become ports: ``inputs``,
    driven by the testbench (nothing in the design may drive them), and ``outputs``, read."""

    def __init__(self, design, *, inputs=None, outputs=None, name=None):
        self._name = name or type(design).__name__.lower()
        self._mapping = {}
        if inputs is None and outputs is None:
            self._top, self._ports = flat_top(design, mapping=self._mapping)
        else:
            m = Module()
            m.submodules.design = design
            self._ports = []
            for is_input, values in ((True, inputs or ()), (False, outputs or ())):
                for value in values:
                    value = Value.cast(value)
                    port = Signal(len(value), name=f"p{len(self._ports)}")
                    m.d.comb += value.eq(port) if is_input else port.eq(value)
                    self._ports.append(port)
                    self._mapping[port.name] = (value, is_input)
            self._top = m
        self._period = None
        self._benches = []          # (constructor, kind, background)
        self._vcd = None
        # signal id -> [(start, stop, port, port_lo)]; port -> (width, is_input); and the
        # values named as ports, by identity (an output may be any expression)
        self._segs, self._port_info, self._shadow, self._direct = {}, {}, {}, {}
        for port, (value, is_input) in self._mapping.items():
            value = Value.cast(value)
            width, pos = len(value), 0
            self._port_info[port] = (width, is_input)
            self._direct[id(value)] = (value, port)
            if not is_input and not isinstance(value, (Signal, Slice, Concat)):
                continue
            init = 0
            for sig, a, b in _chunks(value):
                self._segs.setdefault(id(sig), []).append((a, b, port, pos))
                init |= ((sig.init >> a) & _mask(b - a)) << pos
                pos += b - a
            if is_input:
                self._shadow[port] = init

    # -- amaranth.sim.Simulator's API -------------------------------------------------------
    def add_clock(self, period, *, phase=None, domain="sync", if_exists=False):
        self._period = period

    def add_testbench(self, constructor, *, background=False):
        self._benches.append((constructor, "testbench", background))

    def add_process(self, process):
        self._benches.append((process, "process", True))

    @contextlib.contextmanager
    def write_vcd(self, vcd_file, *args, **kwargs):
        self._vcd = vcd_file
        yield

    def run(self):
        self._run(None)

    def run_until(self, deadline, *, run_passive=None):
        if self._period is None:
            raise ValueError("run_until needs add_clock")
        self._run(int(round(deadline / self._period)))

    # -- values ----------------------------------------------------------------------------
    def _fetch(self, port):
        """``(value, mask of the bits that are X or Z)`` of a port."""
        if self._pending or port not in self._cache:
            names = sorted(self._hot | {port})
            ops = self._flush() + [("r", names)]
            self._store(names, self._call(ops)[-1])
            self._hot.add(port)
        return self._cache[port]

    def _store(self, names, values):
        for n, v in zip(names, values):
            if isinstance(v, str):
                bits = v[::-1]
                v = (sum(1 << i for i, c in enumerate(bits) if c == "1"),
                     sum(1 << i for i, c in enumerate(bits) if c not in "01"))
            else:
                v = (v, 0)
            self._cache[n] = v

    def _signal(self, sig):
        segs = self._segs.get(id(sig))
        if not segs:
            raise KeyError(f"{sig.name}: not a port of the simulated component")
        value, xmask, covered = 0, 0, 0
        for a, b, port, plo in segs:
            v, x = self._fetch(port)
            value |= ((v >> plo) & _mask(b - a)) << a
            xmask |= ((x >> plo) & _mask(b - a)) << a
            covered += b - a
        if covered != len(sig):
            raise KeyError(f"{sig.name}: only part of it is a port")
        return value, xmask

    def _eval_x(self, expr):
        value = Value.cast(expr)
        if id(value) in self._direct:
            return self._fetch(self._direct[id(value)][1])
        if isinstance(value, Const):
            return value.value & _mask(len(value)), 0
        if isinstance(value, Signal):
            return self._signal(value)
        if isinstance(value, Slice):
            v, x = self._eval_x(value.value)
            w = _mask(value.stop - value.start)
            return (v >> value.start) & w, (x >> value.start) & w
        if isinstance(value, Concat):
            out, xm, pos = 0, 0, 0
            for part in value.parts:
                v, x = self._eval_x(part)
                out, xm = out | v << pos, xm | x << pos
                pos += len(Value.cast(part))
            return out, xm
        raise TypeError(f"{value!r}: only signals, slices, concatenations and constants are "
                        "evaluated here")

    def _eval(self, expr):
        """The value of ``expr``; with X or Z in it, an :class:`Undefined` that fails the test
        where it is used."""
        v, x = self._eval_x(expr)
        return Undefined(expr, x) if x else v

    def _assign(self, expr, value):
        pos = 0
        for sig, a, b in _chunks(expr):
            part = (value >> pos) & _mask(b - a)
            pos += b - a
            segs = self._segs.get(id(sig))
            if not segs:
                raise KeyError(f"{sig.name}: not a port of the simulated component")
            for sa, sb, port, plo in segs:
                lo, hi = max(a, sa), min(b, sb)
                if lo >= hi:
                    continue
                if not self._port_info[port][1]:
                    raise ValueError(f"{port}: an output of the component cannot be set")
                bits = (part >> (lo - a)) & _mask(hi - lo)
                shift = plo + lo - sa
                old = self._shadow[port]
                new = (old & ~(_mask(hi - lo) << shift)) | (bits << shift)
                if new != old:
                    self._shadow[port] = new
                    self._pending[port] = new

    def _flush(self):
        if not self._pending:
            return []
        ops = [("w", n, v) for n, v in self._pending.items()] + [("s",)]
        self._pending.clear()
        self._cache.clear()
        return ops

    def _call(self, ops):
        self._conn.send(ops)
        return self._conn.recv()

    # -- the scheduler ---------------------------------------------------------------------
    def _ports_of(self, expr):
        if id(Value.cast(expr)) in self._direct:
            return {self._direct[id(Value.cast(expr))][1]}
        names = set()
        for sig, a, b in _chunks(expr) if not isinstance(Value.cast(expr), Const) else ():
            for sa, sb, port, _ in self._segs.get(id(sig), ()):
                if max(a, sa) < min(b, sb):
                    names.add(port)
        return names

    def _edge(self, waiting):
        """One message: settle, read the ports of every waiter's samples (before the edge),
        rise the clock, settle, read the ports read so far (after it)."""
        exprs = [e for _, es in waiting for e in es]
        before = sorted(set().union(*(self._ports_of(e) for e in exprs))) if exprs else []
        after = sorted(self._hot)
        ops = self._flush()
        ops += [("r", before)] if before else []
        ops += [("e",), ("r", after)]
        reply = self._call(ops)
        self._cache = {}
        if before:
            self._store(before, reply[-3])
        samples = [[_shaped(e, self._eval(e)) for e in es] for _, es in waiting]
        self._cache = {}
        self._store(after, reply[-1])
        return samples

    def _schedule(self, cycles):
        coros = []
        for ctor, kind, background in self._benches:
            coros.append({"coro": ctor(_Context(self)), "kind": kind,
                          "critical": not background, "send": None, "t": 0.0})
        # processes resume before testbenches after an edge
        coros.sort(key=lambda c: c["kind"] != "process")
        cycle = 0
        while True:
            waiting = []
            for c in coros:
                while c["coro"] is not None:
                    try:
                        req = c["coro"].send(c["send"])
                    except StopIteration:
                        c["coro"] = None
                        break
                    c["send"] = None
                    if req[0] == "delay":
                        c["t"] += req[1]
                        if self._period is not None and c["t"] >= self._period:
                            raise ValueError("ctx.delay reaches the next clock edge")
                        ops = self._flush()
                        if ops:
                            self._call(ops)
                        continue
                    waiting.append((c, req[1]))
                    break
            if not any(c["critical"] and c["coro"] is not None for c in coros) and cycles is None:
                return
            if cycles is not None and cycle >= cycles:
                return
            samples = self._edge(waiting)
            cycle += 1
            for (c, _), values in zip(waiting, samples):
                c["send"], c["t"] = values, 0.0

    def _run(self, cycles):
        from amaranth.back import rtlil
        from cocotb_tools.runner import get_runner
        from rnic.emit import verilog
        # one Verilog file and one build per netlist: keyed on the RTLIL and on the emitter
        netlist = rtlil.convert(self._top, name="dut", ports=self._ports, emit_src=False)
        emitter = (ROOT / "rtl" / "rnic" / "emit.py").read_bytes()
        key = hashlib.sha256(netlist.encode() + emitter).hexdigest()[:12]
        cfg = BUILD / f"vsim-{self._name}-{key}"
        simulator = simulator_default()
        with _Lock(cfg / ".lock"):
            path = cfg / "dut.v"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                tmp.write_text(verilog(self._top, "dut", ports=self._ports))
                tmp.rename(path)
        runner = get_runner(simulator)
        build_args = []
        if simulator == "verilator":
            verilator_env()
            build_args = ["--no-timing", "-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT",
                          "-Wno-STMTDLY", "-Wno-CASEINCOMPLETE", "--x-assign", "0",
                          "--x-initial", "0"]
            if self._vcd:
                build_args += ["--trace-fst"]
        with _Lock(cfg / f".{simulator}.lock"):
            runner.build(sources=[path], hdl_toplevel="dut", build_dir=cfg / simulator,
                         build_args=build_args, waves=bool(self._vcd), always=False,
                         timescale=("1ns", "1ps"))
        test_dir = cfg / "runs" / f"{os.getpid()}-{secrets.token_hex(4)}"
        test_dir.mkdir(parents=True, exist_ok=True)
        authkey = secrets.token_bytes(16)
        listener = Listener(("127.0.0.1", 0), authkey=authkey)
        env = {
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                           os.environ.get("PYTHONPATH", "")]),
            "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
            "RNIC_VSIM_ADDR": f"{listener.address[0]}:{listener.address[1]}",
            "RNIC_VSIM_KEY": authkey.hex(),
            "RNIC_VSIM_INPUTS": ",".join(f"{n}={v:x}" for n, v in self._shadow.items()),
        }
        results = test_dir / "results.xml"
        failure = []

        def simulate():
            try:
                runner.test(test_module=_MODULE, hdl_toplevel="dut", build_dir=cfg / simulator,
                            test_dir=test_dir, results_xml=str(results), extra_env=env,
                            waves=bool(self._vcd),
                            timescale=("1ns", "1ps") if simulator == "icarus" else None)
            except SystemExit:
                pass
            except BaseException:
                failure.append(traceback.format_exc())

        thread = threading.Thread(target=simulate, daemon=True)
        thread.start()
        listener._listener._socket.settimeout(120)
        try:
            self._conn = listener.accept()
        except OSError as e:
            thread.join(5)
            raise RuntimeError(f"the simulator did not connect ({test_dir}): "
                               f"{''.join(failure) or e}") from None
        finally:
            listener.close()
        self._pending, self._cache, self._hot = {}, {}, set()
        try:
            self._schedule(cycles)
        finally:
            try:
                self._conn.send([("q",)])
                self._conn.close()
            except OSError:
                pass
            thread.join(60)
        if failure:
            raise RuntimeError(failure[0])
        _check_results(results)
