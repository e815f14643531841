"""Flat, AXI-named Verilog wrappers for block-level tests.

Amaranth exports a stream's struct payload as one flat vector. cocotbext-axi wants
``<prefix>_tdata``/``_tkeep``/``_tlast``/``_tuser``/``_tvalid``/``_tready``. :func:`flat_top`
walks a component's signature and gives every port a plain ``Signal``:

* a stream of :func:`rnic.stream.beat_layout` beats becomes an AXI4-Stream port
  ``<name>_tdata, _tkeep, _tlast, _tuser, _tvalid, _tready``;
* any other stream becomes ``<name>_valid``, ``<name>_ready`` and ``<name>_payload`` (the flat
  vector; tests decode it with :func:`sim.wrap.unpack` and the same layout the hardware uses);
* plain signals keep their name (nested names joined with ``__``, array elements ``__i``).

``always_valid``/``always_ready`` streams get no ``valid``/``ready`` port.
"""

from amaranth.hdl import Module, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import Flow

__all__ = ["flat_top", "unpack", "pack"]


def _is_beat(layout):
    return (isinstance(layout, data.StructLayout)
            and set(f for f, _ in layout) == {"data", "keep", "last", "user"})


def flat_top(component, *, reset_name="rst", clock_name="clk", mapping=None):
    """Return ``(module, ports)`` for ``verilog.convert`` with flat, AXI-style port names.

    ``mapping``, a dict, receives ``{port name: (the component's value, is an input)}``."""
    mapping = {} if mapping is None else mapping
    m = Module()
    m.submodules.dut = component
    ports = []

    def plain(name, shape, flow):
        s = Signal(shape, name=name)
        ports.append(s)
        return s

    def elements(name, inner, dimensions):
        """``(name, element)`` of every element of an array member (``name__i__j``)."""
        if not dimensions:
            yield name, inner
            return
        for i in range(dimensions[0]):
            yield from elements(f"{name}__{i}", inner[i], dimensions[1:])

    def walk(sig, obj, prefix):
        for mname, member in sig.members.items():
            name = f"{prefix}__{mname}" if prefix else mname
            for ename, inner in elements(name, getattr(obj, mname), member.dimensions):
                if member.is_port:
                    s = plain(ename, Shape.cast(member.shape).width, member.flow)
                    mapping[ename] = (inner, member.flow == Flow.In)
                    if member.flow == Flow.In:
                        m.d.comb += Value.cast(inner).eq(s)
                    else:
                        m.d.comb += s.eq(Value.cast(inner))
                elif isinstance(member.signature, stream.Signature):
                    stream_port(member.signature, inner, ename, member.flow)
                else:
                    walk(member.signature, inner, ename)

    def stream_port(isig, inner, name, flow):
        # flow Out = the component drives payload/valid
        drive_out = flow == Flow.Out
        layout = isig.members["payload"].shape
        if _is_beat(layout):
            dw = Shape.cast(layout["data"].shape).width
            fields = {"tdata": ("data", dw), "tkeep": ("keep", dw // 8),
                      "tlast": ("last", 1), "tuser": ("user", 1)}
            for suffix, (fname, fw) in fields.items():
                s = plain(f"{name}_{suffix}", fw, None)
                f = getattr(inner.payload, fname)
                m.d.comb += (s.eq(f) if drive_out else f.eq(s))
                mapping[f"{name}_{suffix}"] = (f, not drive_out)
            vname, rname = f"{name}_tvalid", f"{name}_tready"
        else:
            s = plain(f"{name}_payload", Shape.cast(layout).width, None)
            pv = Value.cast(inner.payload)
            m.d.comb += (s.eq(pv) if drive_out else pv.eq(s))
            mapping[f"{name}_payload"] = (pv, not drive_out)
            vname, rname = f"{name}_valid", f"{name}_ready"
        if not isig.always_valid:
            v = plain(vname, 1, None)
            m.d.comb += (v.eq(inner.valid) if drive_out else inner.valid.eq(v))
            mapping[vname] = (inner.valid, not drive_out)
        if not isig.always_ready:
            r = plain(rname, 1, None)
            m.d.comb += (inner.ready.eq(r) if drive_out else r.eq(inner.ready))
            mapping[rname] = (inner.ready, drive_out)

    walk(component.signature, component, "")
    return m, ports


def _layout_fields(layout, prefix=""):
    """Yield (path, offset, width) of every leaf field of a layout."""
    if isinstance(layout, data.Layout):
        for name, field in layout:
            path = f"{prefix}.{name}" if prefix else str(name)
            yield from _layout_fields_with_offset(field, path)
    else:
        yield prefix, 0, Shape.cast(layout).width


def _layout_fields_with_offset(field, path):
    for sub, off, w in _layout_fields(field.shape, path):
        yield sub, field.offset + off, w


def unpack(layout, value):
    """Decode the integer ``value`` of ``layout`` into a nested dict (ArrayLayouts as lists)."""
    layout = data.Layout.cast(layout) if not isinstance(layout, (int, Shape)) else layout
    if not isinstance(layout, data.Layout):
        return value
    if isinstance(layout, data.ArrayLayout):
        w = Shape.cast(layout.elem_shape).width
        return [unpack(layout.elem_shape, (value >> (i * w)) & ((1 << w) - 1))
                for i in range(layout.length)]
    out = {}
    for name, field in layout:
        w = Shape.cast(field.shape).width
        out[name] = unpack(field.shape, (value >> field.offset) & ((1 << w) - 1))
    return out


def pack(layout, values):
    """Inverse of :func:`unpack`: an integer from a (partial) nested dict/list."""
    if not isinstance(layout, data.Layout):
        try:
            layout = data.Layout.cast(layout)
        except TypeError:
            return int(values) & ((1 << Shape.cast(layout).width) - 1)
    word = 0
    if isinstance(layout, data.ArrayLayout):
        w = Shape.cast(layout.elem_shape).width
        for i, v in enumerate(values):
            word |= pack(layout.elem_shape, v) << (i * w)
        return word
    for name, v in values.items():
        field = layout[name]
        word |= pack(field.shape, v) << field.offset
    return word
