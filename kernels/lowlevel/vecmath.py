"""Elementwise maths that vectorises, in float64 and float32: fused multiply-add, exp, dtype casts.

numba hands `np.exp` to libm one element at a time, so loops over it do not vectorise; `exp_vec`
is an exp written in plain arithmetic (Cody-Waite reduction, Taylor polynomial in Horner form
with fused multiply-adds, 2^k from its bits) that LLVM turns into SIMD code, and that gives the
same bits on every machine (llvm.fma is IEEE fusedMultiplyAdd, in hardware where there is one).

- `fma(a, b, c)`: a * b + c with one rounding, for float32 or float64 (all three the same type).
- `exp_vec(x)`: float64, within 1 ulp for |x| <= 708, x clamped to [-708, 708] (NaN stays NaN).
- `exp_unclamped(x)`: the same arithmetic without the clamp, so the same bits for |x| <= 708 and
  a little faster (the caller guarantees the range).
- `exp32_vec(x)`: float32, within 2 ulp, x clamped to [-87, 88].
- `vexp(x)` / `vexp_unclamped(x)`: `exp_vec` / `exp_unclamped` for float64 x, `exp32_vec` for
  float32 x, chosen when the caller is compiled (numba overloads), so one kernel source serves
  both precisions; `like(x, arr)`: the scalar x converted to arr's dtype (keeps float32 loops in
  float32: a Python float literal is float64 in numba); `tiny_like(arr)`: the smallest normal
  number of arr's dtype.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)


@intrinsic
def _int64_bits_as_float64(typingctx, bits):
    """Reinterpret the bits of an int64 as a float64 (for 2^k in `exp_vec`)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return sig, codegen


@intrinsic
def _float64_bits_as_int64(typingctx, x):
    """Reinterpret the bits of a float64 as an int64 (k from the rounding shifter in `exp_vec`)."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return sig, codegen


@intrinsic
def _int32_bits_as_float32(typingctx, bits):
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return sig, codegen


@intrinsic
def _float32_bits_as_int32(typingctx, x):
    sig = types.int32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))

    return sig, codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c with one rounding (IEEE fusedMultiplyAdd, llvm.fma: the same bits on every
    machine, in hardware where there is an FMA unit); loops over it still vectorise.
    float64 or float32, all three arguments of the same type."""
    if not (a == b == c and a in (types.float32, types.float64)):
        return None
    sig = a(a, a, a)

    def codegen(context, builder, signature, args):
        ft = context.get_value_type(signature.return_type)
        fn = builder.module.declare_intrinsic("llvm.fma", [ft], ir.FunctionType(ft, [ft] * 3))
        return builder.call(fn, args)

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # trailing zeros: k * _LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0  # 1.5 * 2^52: t + _SHIFTER rounds t (|t| < 2^51) to an integer
_SHIFTER_BITS = 0x4338000000000000  # its bits: those of t + _SHIFTER minus these = that integer
TINY = 2.2250738585072014e-308  # smallest normal float64


@njit(nogil=True, cache=True, inline="always")
def exp_unclamped(x):
    """exp(x) within 1 ulp for |x| <= 708 (see `exp_vec`, which clamps x first): x = k ln2 + r
    (Cody-Waite), |r| <= ln2/2, e^r by its Taylor polynomial of degree 13 (truncation < 5e-18) in
    Horner form with fused multiply-adds, times 2^k built from its bits; k = round(x log2 e) by
    the 1.5 * 2^52 shifter (no float-to-int conversion)."""
    t = fma(x, _LOG2E, _SHIFTER)
    kf = t - _SHIFTER
    r = fma(-kf, _LN2_LO, fma(-kf, _LN2_HI, x))
    p = 1.0 / 6227020800.0
    p = fma(p, r, 1.0 / 479001600.0)
    p = fma(p, r, 1.0 / 39916800.0)
    p = fma(p, r, 1.0 / 3628800.0)
    p = fma(p, r, 1.0 / 362880.0)
    p = fma(p, r, 1.0 / 40320.0)
    p = fma(p, r, 1.0 / 5040.0)
    p = fma(p, r, 1.0 / 720.0)
    p = fma(p, r, 1.0 / 120.0)
    p = fma(p, r, 1.0 / 24.0)
    p = fma(p, r, 1.0 / 6.0)
    p = fma(p, r, 0.5)
    p = fma(p, r, 1.0)
    p = fma(p, r, 1.0)
    ki = _float64_bits_as_int64(t) - _SHIFTER_BITS  # NaN: some k, p is NaN
    return p * _int64_bits_as_float64((ki + 1023) << 52)


@njit(nogil=True, cache=True, inline="always")
def exp_vec(x):
    """exp(x) within 1 ulp for |x| <= 708, written so that loops over it vectorise (libm's exp
    does not); x is clamped to [-708, 708] (exp(-708) ~ 3e-308 stands in for smaller values: a
    weight relative to the row's largest, 1); NaN stays NaN. Arithmetic: `exp_unclamped`."""
    x = x if not (x < -708.0) else -708.0
    x = x if not (x > 708.0) else 708.0
    return exp_unclamped(x)


_F32 = np.float32
_LN2_HI32 = 0.693359375  # 8 significant bits: k * _LN2_HI32 is exact in float32 for |k| < 2^15
_LN2_LO32 = -2.12194440e-4
_SHIFTER32 = 12582912.0  # 1.5 * 2^23
_SHIFTER32_BITS = 0x4B400000


@njit(nogil=True, cache=True, inline="always")
def exp32_vec(x):
    """float32 exp within 2 ulp, x clamped to [-87, 88] (normal results): the scheme of
    `exp_unclamped` with float32 constants and the Taylor polynomial of degree 7."""
    x = x if not (x < _F32(-87.0)) else _F32(-87.0)
    x = x if not (x > _F32(88.0)) else _F32(88.0)
    t = fma(x, _F32(_LOG2E), _F32(_SHIFTER32))
    kf = t - _F32(_SHIFTER32)
    r = fma(-kf, _F32(_LN2_LO32), fma(-kf, _F32(_LN2_HI32), x))
    p = _F32(1.0 / 5040.0)
    p = fma(p, r, _F32(1.0 / 720.0))
    p = fma(p, r, _F32(1.0 / 120.0))
    p = fma(p, r, _F32(1.0 / 24.0))
    p = fma(p, r, _F32(1.0 / 6.0))
    p = fma(p, r, _F32(0.5))
    p = fma(p, r, _F32(1.0))
    p = fma(p, r, _F32(1.0))
    ki = _float32_bits_as_int32(t) - np.int32(_SHIFTER32_BITS)
    return p * _int32_bits_as_float32((ki + np.int32(127)) << np.int32(23))


def vexp(x):
    """exp of a float64 (`exp_vec`) or float32 (`exp32_vec`) scalar, inside numba code only."""
    raise NotImplementedError("vexp is for numba-compiled code")


def vexp_unclamped(x):
    """`exp_unclamped` (float64) or `exp32_vec` (float32), inside numba code only."""
    raise NotImplementedError("vexp_unclamped is for numba-compiled code")


def like(x, arr):
    """The scalar x converted to the dtype of the array arr, inside numba code only."""
    raise NotImplementedError("like is for numba-compiled code")


def tiny_like(arr):
    """The smallest normal number of arr's dtype, inside numba code only."""
    raise NotImplementedError("tiny_like is for numba-compiled code")


@overload(vexp)
def _vexp(x):
    if x == types.float32:
        return lambda x: exp32_vec(x)
    return lambda x: exp_vec(x)


@overload(vexp_unclamped)
def _vexp_unclamped(x):
    if x == types.float32:
        return lambda x: exp32_vec(x)
    return lambda x: exp_unclamped(x)


@overload(like)
def _like(x, arr):
    if arr.dtype == types.float32:
        return lambda x, arr: np.float32(x)
    return lambda x, arr: np.float64(x)


@overload(tiny_like)
def _tiny_like(arr):
    if arr.dtype == types.float32:
        return lambda arr: np.float32(1.1754943508222875e-38)
    return lambda arr: TINY
