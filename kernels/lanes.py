"""Eight float64 lanes as one LLVM vector (<8 x double>) inside njit: loads, stores and arithmetic.

numba has no SIMD type, and LLVM keeps a sum in a register only when it can prove nothing else
writes it: with accumulators in arrays it reloads them every step. `Lanes` is a numba value held
in a vector register; every operation is one IEEE operation per lane (fadd, fsub, fmul, fdiv,
without fast-math flags, so no reassociation and no FMA contraction), so a lane computes the same
bits as the scalar code it replaces. The kernels use it across tokens (lane = token) on states
kept transposed, (d, 8): `stochastic_lanes`.

Lanes values stay local to a function (never arguments of a cached function: its type is not
meant to be pickled into numba's cache index).
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import intrinsic, models, register_model

WIDTH = 8
_VEC = ir.VectorType(ir.DoubleType(), WIDTH)


class LanesType(types.Type):
    def __init__(self):
        super().__init__(name="Lanes8")


lanes_type = LanesType()


@register_model(LanesType)
class _LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VEC)


def _pointer(context, builder, arrty, arr, offset):
    """Address of element `offset` (flat, C order) of arr, as a <8 x double>*."""
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [offset]), _VEC.as_pointer())


@intrinsic
def load(typingctx, arr, offset):
    """Lanes arr.flat[offset:offset + 8] (arr C-contiguous float64)."""
    def codegen(context, builder, sig, args):
        return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1]), align=8)

    return lanes_type(arr, types.intp), codegen


@intrinsic
def store(typingctx, arr, offset, v):
    """arr.flat[offset:offset + 8] = v."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _pointer(context, builder, sig.args[0], args[0], args[1]), align=8)
        return context.get_dummy_value()

    return types.none(arr, types.intp, lanes_type), codegen


@intrinsic
def splat(typingctx, x):
    """All eight lanes x."""
    def codegen(context, builder, sig, args):
        v = builder.insert_element(ir.Constant(_VEC, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(v, ir.Constant(_VEC, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH))

    return lanes_type(types.float64), codegen


def _binary(op):
    @intrinsic
    def fn(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, op)(args[0], args[1])

        return lanes_type(lanes_type, lanes_type), codegen

    return fn


add = _binary("fadd")
sub = _binary("fsub")
mul = _binary("fmul")
div = _binary("fdiv")


@intrinsic
def sqrt(typingctx, a):
    """Lane-wise square root (llvm.sqrt: correctly rounded, as the scalar np.sqrt)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]),
                                            "llvm.sqrt.v8f64")
        return builder.call(fn, args)

    return lanes_type(lanes_type), codegen


@intrinsic
def max_of(typingctx, m, v):
    """Lane-wise `v if v > m else m`: one step of the scalar `if v > m: m = v` (NaN v skipped)."""
    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(">", args[1], args[0]), args[1], args[0])

    return lanes_type(lanes_type, lanes_type), codegen


@intrinsic
def lane(typingctx, v, i):
    """Lane i of v, a float64."""
    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], args[1])

    return types.float64(lanes_type, types.intp), codegen


@intrinsic
def all_normal(typingctx, v):
    """True if every lane is in (0, inf): not zero, inf or NaN (a squared norm to invert)."""
    def codegen(context, builder, sig, args):
        pos = builder.fcmp_ordered(">", args[0], ir.Constant(_VEC, [0.0] * WIDTH))
        fin = builder.fcmp_ordered("<", args[0], ir.Constant(_VEC, [float("inf")] * WIDTH))
        bits = builder.bitcast(builder.and_(pos, fin), ir.IntType(WIDTH))
        return builder.icmp_unsigned("==", bits, ir.Constant(ir.IntType(WIDTH), (1 << WIDTH) - 1))

    return types.boolean(lanes_type), codegen


def _fma(builder, a, b, c):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                        "llvm.fma.v8f64")
    return builder.call(fn, [a, b, c])


@intrinsic
def exp(typingctx, v, tail, head):
    """Lane-wise `fast_exp.exp_array` (glibc's exp, its bits) for lanes with |v| < 512, 1 + v
    below 2^-54; lanes with |v| >= 512, inf or NaN are wrong here: `exp_is_rare` tells, and the
    caller redoes them by np.exp (as exp_array). tail, head: fast_exp.TAIL, fast_exp.HEAD."""
    from .fast_exp import C2, C3, C4, C5, INV_LN2_N, NEG_LN2_HI_N, NEG_LN2_LO_N, SHIFT, TABLE_BITS

    def codegen(context, builder, sig, args):
        x = args[0]
        i64v = ir.VectorType(ir.IntType(64), WIDTH)
        cst = lambda c: ir.Constant(_VEC, [c] * WIDTH)  # noqa: E731
        icst = lambda c: ir.Constant(i64v, [c] * WIDTH)  # noqa: E731
        kd = _fma(builder, x, cst(INV_LN2_N), cst(SHIFT))
        ki = builder.bitcast(kd, i64v)
        idx = builder.and_(ki, icst((1 << TABLE_BITS) - 1))
        tdata = context.make_array(sig.args[1])(context, builder, value=args[1]).data
        hdata = context.make_array(sig.args[2])(context, builder, value=args[2]).data
        tl = ir.Constant(_VEC, ir.Undefined)
        hd = ir.Constant(i64v, ir.Undefined)
        for q in range(WIDTH):  # the table entries, lane by lane
            pos = ir.Constant(ir.IntType(32), q)
            p = builder.extract_element(idx, pos)
            tl = builder.insert_element(tl, builder.load(builder.gep(tdata, [p])), pos)
            hd = builder.insert_element(hd, builder.load(builder.gep(hdata, [p])), pos)
        kd = builder.fsub(kd, cst(SHIFT))
        r = _fma(builder, kd, cst(NEG_LN2_LO_N), _fma(builder, kd, cst(NEG_LN2_HI_N), x))
        scale = builder.bitcast(builder.add(hd, builder.shl(ki, icst(52 - TABLE_BITS))), _VEC)
        r2 = builder.fmul(r, r)
        tmp = _fma(builder, builder.fmul(r2, r2), _fma(builder, r, cst(C5), cst(C4)),
                   _fma(builder, r2, _fma(builder, r, cst(C3), cst(C2)), builder.fadd(tl, r)))
        y = _fma(builder, scale, tmp, scale)
        top = builder.and_(builder.lshr(builder.bitcast(x, i64v), icst(52)), icst(0x7FF))
        tiny = builder.icmp_unsigned("<", top, icst(0x3C9))
        return builder.select(tiny, builder.fadd(cst(1.0), x), y)

    return lanes_type(v, tail, head), codegen


@intrinsic
def exp_is_rare(typingctx, v):
    """True if a lane has |v| >= 512, inf or NaN (where `exp` is not libm's)."""
    def codegen(context, builder, sig, args):
        i64v = ir.VectorType(ir.IntType(64), WIDTH)
        top = builder.and_(builder.lshr(builder.bitcast(args[0], i64v), ir.Constant(i64v, [52] * WIDTH)),
                           ir.Constant(i64v, [0x7FF] * WIDTH))
        big = builder.icmp_unsigned(">=", top, ir.Constant(i64v, [0x408] * WIDTH))
        return builder.icmp_unsigned("!=", builder.bitcast(big, ir.IntType(WIDTH)),
                                     ir.Constant(ir.IntType(WIDTH), 0))

    return types.boolean(lanes_type), codegen
