"""Eight float64 lanes as one LLVM vector (<8 x double>) inside njit: loads, stores and arithmetic;
and sixteen (<16 x double>, two trajectories side by side: `stochastic.pairs`).

numba has no SIMD type, and LLVM keeps a sum in a register only when it can prove nothing else
writes it: with accumulators in arrays it reloads them every step. `Lanes` is a numba value held
in a vector register; every operation is one IEEE operation per lane (fadd, fsub, fmul, fdiv,
without fast-math flags, so no reassociation and no FMA contraction), so a lane computes the same
bits as the scalar code it replaces. The kernels use it across tokens (lane = token) on states
kept transposed, (d, 8): `stochastic.lanes`. The arithmetic, `sqrt`, `max_of`, `lane`, `exp`,
`exp_is_rare`, `all_normal`, `where` and `store` take either width; `load16`, `splat16` and
`splat2` (a in lanes 0-7, b in lanes 8-15) make the 16-wide values; `load_as`, `splat_as` and
`width_of` serve code written once for both widths (the width of a template value); `load_quads`,
`store_quads` and `splat2q` move the upper four lanes of each half of a 16-wide row as eight.

Lanes values stay local to a function (never arguments of a cached function: its type is not
meant to be pickled into numba's cache index).
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic, models, register_model

WIDTH = 8
WIDE = 16  # two trajectories' eight lanes
_VEC = ir.VectorType(ir.DoubleType(), WIDTH)


class LanesType(types.Type):
    def __init__(self, width):
        self.width = width
        super().__init__(name=f"Lanes{width}")


lanes_type = LanesType(WIDTH)
wide_type = LanesType(WIDE)


def _vec(ty):
    return ir.VectorType(ir.DoubleType(), ty.width)


@register_model(LanesType)
class _LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _vec(fe_type))


def _pointer(context, builder, arrty, arr, offset, vec=_VEC):
    """Address of element `offset` (flat, C order) of arr, as a <w x double>*."""
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [offset]), vec.as_pointer())


@intrinsic
def load(typingctx, arr, offset):
    """Lanes arr.flat[offset:offset + 8] (arr C-contiguous float64)."""
    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1]), align=8)

    return lanes_type(arr, types.intp), codegen


@intrinsic
def load16(typingctx, arr, offset):
    """16 lanes arr.flat[offset:offset + 16]."""
    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1],
                                     _vec(wide_type)), align=8)

    return wide_type(arr, types.intp), codegen


@intrinsic
def store(typingctx, arr, offset, v):
    """arr.flat[offset:offset + w] = v (w = 8 or 16, v's width)."""
    if not isinstance(v, LanesType):
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _pointer(context, builder, sig.args[0], args[0], args[1],
                                        _vec(sig.args[2])), align=8)
        return context.get_dummy_value()

    return types.none(arr, types.intp, v), codegen


def _splat(builder, x, width, vec):
    v = builder.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vec, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))


@intrinsic
def splat(typingctx, x):
    """All eight lanes x."""
    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], WIDTH, _VEC)

    return lanes_type(types.float64), codegen


@intrinsic
def splat16(typingctx, x):
    """All sixteen lanes x."""
    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], WIDE, _vec(wide_type))

    return wide_type(types.float64), codegen


@intrinsic
def splat2(typingctx, a, b):
    """Sixteen lanes: a in lanes 0-7, b in lanes 8-15 (one value per trajectory)."""
    def codegen(context, builder, sig, args):
        va = _splat(builder, args[0], WIDTH, _VEC)
        vb = _splat(builder, args[1], WIDTH, _VEC)
        return builder.shuffle_vector(va, vb, ir.Constant(ir.VectorType(ir.IntType(32), WIDE),
                                                          list(range(WIDE))))

    return wide_type(types.float64, types.float64), codegen


@intrinsic
def load_as(typingctx, like, arr, offset):
    """arr.flat[offset:offset + w] as lanes of like's width w (for code serving both widths)."""
    if not isinstance(like, LanesType):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[1], args[1], args[2], _vec(like)),
                            align=8)

    return like(like, arr, types.intp), codegen


@intrinsic
def splat_as(typingctx, like, x):
    """All lanes x, like's width."""
    if not isinstance(like, LanesType):
        return None

    def codegen(context, builder, sig, args):
        return _splat(builder, args[1], like.width, _vec(like))

    return like(like, types.float64), codegen


@intrinsic
def width_of(typingctx, like):
    """like's number of lanes (a constant)."""
    if not isinstance(like, LanesType):
        return None

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, like.width)

    return types.intp(like), codegen


_QUAD = ir.VectorType(ir.DoubleType(), 4)


@intrinsic
def load_quads(typingctx, arr, off_a, off_b):
    """Eight lanes: arr.flat[off_a:off_a + 4], then arr.flat[off_b:off_b + 4] (the upper four
    lanes of each trajectory in a 16-wide row: `stochastic.pairs`' Householder, once the lower
    four are no longer read)."""
    def codegen(context, builder, sig, args):
        qa = builder.load(_pointer(context, builder, sig.args[0], args[0], args[1], _QUAD), align=8)
        qb = builder.load(_pointer(context, builder, sig.args[0], args[0], args[2], _QUAD), align=8)
        return builder.shuffle_vector(qa, qb, ir.Constant(ir.VectorType(ir.IntType(32), WIDTH),
                                                          list(range(WIDTH))))

    return lanes_type(arr, types.intp, types.intp), codegen


@intrinsic
def store_quads(typingctx, arr, off_a, off_b, v):
    """arr.flat[off_a:off_a + 4] = v[0:4], arr.flat[off_b:off_b + 4] = v[4:8]."""
    def codegen(context, builder, sig, args):
        for q, off in ((0, args[1]), (4, args[2])):
            part = builder.shuffle_vector(args[3], ir.Constant(_VEC, ir.Undefined),
                                          ir.Constant(ir.VectorType(ir.IntType(32), 4),
                                                      list(range(q, q + 4))))
            builder.store(part, _pointer(context, builder, sig.args[0], args[0], off, _QUAD), align=8)
        return context.get_dummy_value()

    return types.none(arr, types.intp, types.intp, lanes_type), codegen


@intrinsic
def splat2q(typingctx, a, b):
    """Eight lanes: a in lanes 0-3, b in lanes 4-7 (`load_quads`' layout)."""
    def codegen(context, builder, sig, args):
        va = _splat(builder, args[0], 4, _QUAD)
        vb = _splat(builder, args[1], 4, _QUAD)
        return builder.shuffle_vector(va, vb, ir.Constant(ir.VectorType(ir.IntType(32), WIDTH),
                                                          list(range(WIDTH))))

    return lanes_type(types.float64, types.float64), codegen


def _binary(op):
    @intrinsic
    def fn(typingctx, a, b):
        if not (isinstance(a, LanesType) and a == b):
            return None

        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])

        return a(a, a), codegen

    return fn


add = _binary("fadd")
sub = _binary("fsub")
mul = _binary("fmul")
div = _binary("fdiv")


@intrinsic
def sqrt(typingctx, a):
    """Lane-wise square root (llvm.sqrt: correctly rounded, as the scalar np.sqrt)."""
    vec = _vec(a)

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec]),
                                            f"llvm.sqrt.v{a.width}f64")
        return builder.call(fn, args)

    return a(a), codegen


@intrinsic
def max_of(typingctx, m, v):
    """Lane-wise `v if v > m else m`: one step of the scalar `if v > m: m = v` (NaN v skipped)."""
    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(">", args[1], args[0]), args[1], args[0])

    return m(m, m), codegen


@intrinsic
def where(typingctx, mask, a, b):
    """Lane-wise `a if mask != 0 else b` (mask lanes 1.0 or 0.0): a blend, no arithmetic."""
    def codegen(context, builder, sig, args):
        zero = ir.Constant(_vec(mask), [0.0] * mask.width)
        return builder.select(builder.fcmp_unordered("!=", args[0], zero), args[1], args[2])

    return a(mask, a, b), codegen


@intrinsic
def lane(typingctx, v, i):
    """Lane i of v, a float64."""
    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], args[1])

    return types.float64(v, types.intp), codegen


@intrinsic
def all_normal(typingctx, v):
    """True if every lane is in (0, inf): not zero, inf or NaN (a squared norm to invert)."""
    w = v.width

    def codegen(context, builder, sig, args):
        pos = builder.fcmp_ordered(">", args[0], ir.Constant(_vec(v), [0.0] * w))
        fin = builder.fcmp_ordered("<", args[0], ir.Constant(_vec(v), [float("inf")] * w))
        bits = builder.bitcast(builder.and_(pos, fin), ir.IntType(w))
        return builder.icmp_unsigned("==", bits, ir.Constant(ir.IntType(w), (1 << w) - 1))

    return types.boolean(v), codegen


def _fma(builder, a, b, c):
    vec = a.type
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                        f"llvm.fma.v{vec.count}f64")
    return builder.call(fn, [a, b, c])


@intrinsic
def exp(typingctx, v, tail, head):
    """Lane-wise `lowlevel.fast_exp.exp_array` (glibc's exp, its bits) for lanes with |v| < 512, 1 + v
    below 2^-54; lanes with |v| >= 512, inf or NaN are wrong here: `exp_is_rare` tells, and the
    caller redoes them by np.exp (as exp_array). tail, head: fast_exp.TAIL, fast_exp.HEAD."""
    from .fast_exp import C2, C3, C4, C5, INV_LN2_N, NEG_LN2_HI_N, NEG_LN2_LO_N, SHIFT, TABLE_BITS

    w, vec = v.width, _vec(v)

    def codegen(context, builder, sig, args):
        x = args[0]
        i64v = ir.VectorType(ir.IntType(64), w)
        cst = lambda c: ir.Constant(vec, [c] * w)  # noqa: E731
        icst = lambda c: ir.Constant(i64v, [c] * w)  # noqa: E731
        kd = _fma(builder, x, cst(INV_LN2_N), cst(SHIFT))
        ki = builder.bitcast(kd, i64v)
        idx = builder.and_(ki, icst((1 << TABLE_BITS) - 1))
        tdata = context.make_array(sig.args[1])(context, builder, value=args[1]).data
        hdata = context.make_array(sig.args[2])(context, builder, value=args[2]).data
        tl = ir.Constant(vec, ir.Undefined)
        hd = ir.Constant(i64v, ir.Undefined)
        for q in range(w):  # the table entries, lane by lane
            pos = ir.Constant(ir.IntType(32), q)
            p = builder.extract_element(idx, pos)
            tl = builder.insert_element(tl, builder.load(builder.gep(tdata, [p])), pos)
            hd = builder.insert_element(hd, builder.load(builder.gep(hdata, [p])), pos)
        kd = builder.fsub(kd, cst(SHIFT))
        r = _fma(builder, kd, cst(NEG_LN2_LO_N), _fma(builder, kd, cst(NEG_LN2_HI_N), x))
        scale = builder.bitcast(builder.add(hd, builder.shl(ki, icst(52 - TABLE_BITS))), vec)
        r2 = builder.fmul(r, r)
        tmp = _fma(builder, builder.fmul(r2, r2), _fma(builder, r, cst(C5), cst(C4)),
                   _fma(builder, r2, _fma(builder, r, cst(C3), cst(C2)), builder.fadd(tl, r)))
        y = _fma(builder, scale, tmp, scale)
        top = builder.and_(builder.lshr(builder.bitcast(x, i64v), icst(52)), icst(0x7FF))
        tiny = builder.icmp_unsigned("<", top, icst(0x3C9))
        return builder.select(tiny, builder.fadd(cst(1.0), x), y)

    return v(v, tail, head), codegen


@intrinsic
def exp_is_rare(typingctx, v):
    """True if a lane has |v| >= 512, inf or NaN (where `exp` is not libm's)."""
    w = v.width

    def codegen(context, builder, sig, args):
        i64v = ir.VectorType(ir.IntType(64), w)
        top = builder.and_(builder.lshr(builder.bitcast(args[0], i64v), ir.Constant(i64v, [52] * w)),
                           ir.Constant(i64v, [0x7FF] * w))
        big = builder.icmp_unsigned(">=", top, ir.Constant(i64v, [0x408] * w))
        return builder.icmp_unsigned("!=", builder.bitcast(big, ir.IntType(w)),
                                     ir.Constant(ir.IntType(w), 0))

    return types.boolean(v), codegen
