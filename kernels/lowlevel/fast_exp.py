"""exp over a whole array in one vectorisable loop, bit for bit the libm exp numba calls (glibc).

numba compiles np.exp(x) for a float64 scalar into a call of the C library's exp: on x86-64 Linux
glibc >= 2.28, whose exp (Szabolcs Nagy's, glibc sysdeps/ieee754/dbl-64/e_exp.c) is, with a
table of N = 128 entries 2^(k/N) = H_k (1 + T_k),

    kd = fma(x, N/ln2, Shift) - Shift,  k = bits(kd + Shift) (an integer),
    r = fma(kd, -ln2_lo/N, fma(kd, -ln2_hi/N, x)),          r in [-ln2/2N, ln2/2N],
    tmp = fma(r^2 r^2, fma(r, C5, C4), fma(r^2, fma(r, C3, C2), T_k + r)),
    exp(x) = fma(s, tmp, s),  s = double with bits bits(H_k) + (k >> 7) << 52 (2^(k/N) scaled),

for 2^-54 <= |x| < 512 (|x| < 2^-54 gives 1 + x; larger |x| take the overflow / underflow paths).
The fused multiply-adds are those of glibc's `__exp_fma`, the variant it runs on CPUs with FMA and
AVX2 (read off its machine code). A call per element costs about 5 ns and cannot be vectorised;
`exp_array` evaluates the formula for every element of an array in one loop that LLVM vectorises
(the table entries read in a scalar pass before: 1.2 instead of 4.5 ns per element on this
machine's Zen 4), takes the 1 + x branch by a select and hands the rare elements outside
the main range (|x| >= 512, inf, NaN) to np.exp one by one. So it returns libm's bits wherever
libm runs this algorithm; `matches_libm` checks that on the running machine (other C libraries or
CPUs without FMA compute exp differently), and callers use it only where it does.
"""

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import types
from numba.core.extending import intrinsic

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)

TABLE_BITS = 7
_N = 1 << TABLE_BITS
INV_LN2_N = float.fromhex("0x1.71547652b82fep7")
NEG_LN2_HI_N = float.fromhex("-0x1.62e42fefa0000p-8")
NEG_LN2_LO_N = float.fromhex("-0x1.cf79abc9e3b3ap-47")
SHIFT = float.fromhex("0x1.8p52")
C2 = float.fromhex("0x1.ffffffffffdbdp-2")
C3 = float.fromhex("0x1.555555555543cp-3")
C4 = float.fromhex("0x1.55555cf172b91p-5")
C5 = float.fromhex("0x1.1111167a4d017p-7")


def _table():
    """glibc's __exp_data.tab: per k, bits(T_k) and bits(H_k) - (k << 45), from 2^(k/N) to 60 digits
    (H_k its nearest double, T_k = (2^(k/N) - H_k) / H_k rounded): equal to glibc's table entry
    by entry (tests/test_fast_exp.py reads both off the same formula as glibc's comment)."""
    from decimal import Decimal, localcontext

    tail, head = np.empty(_N, np.float64), np.empty(_N, np.int64)
    with localcontext() as ctx:
        ctx.prec = 60
        for k in range(_N):
            e = Decimal(2) ** (Decimal(k) / Decimal(_N))
            hk = float(e)
            tail[k] = float((e - Decimal(hk)) / Decimal(hk))
            head[k] = int(np.float64(hk).view(np.int64)) - (k << (52 - TABLE_BITS))
    return tail, head


TAIL, HEAD = _table()


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma: the FMA instruction, vectorisable)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        f64 = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f64], ir.FunctionType(f64, [f64] * 3))
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _bits(typingctx, x):
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def _from_bits(typingctx, i):
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@njit(nogil=True, cache=True)
def exp_array(x, out, count, tail, head, tail_work, head_work):
    """out[p] = exp(x[p]) for p < count (1-D float64 arrays), libm's bits (module docstring).

    tail, head: TAIL, HEAD; tail_work (float64), head_work (int64): (>= count,) scratch for the
    table entries, read in a scalar pass first (a gather in the main loop keeps LLVM from
    vectorising it). x and out must not overlap (x is read again for the rare elements). The main loop has no branch, so LLVM
    vectorises it; elements with |x| >= 512, inf or NaN are redone by np.exp.
    """
    for p in range(count):
        idx = _bits(fma(x[p], INV_LN2_N, SHIFT)) & (_N - 1)
        tail_work[p] = tail[idx]
        head_work[p] = head[idx]
    rare = 0
    for p in range(count):
        v = x[p]
        top = (_bits(v) >> 52) & 0x7FF
        kd = fma(v, INV_LN2_N, SHIFT)
        ki = _bits(kd)
        kd -= SHIFT
        r = fma(kd, NEG_LN2_LO_N, fma(kd, NEG_LN2_HI_N, v))
        scale = _from_bits(head_work[p] + (ki << (52 - TABLE_BITS)))
        r2 = r * r
        tmp = fma(r2 * r2, fma(r, C5, C4), fma(r2, fma(r, C3, C2), tail_work[p] + r))
        y = fma(scale, tmp, scale)
        out[p] = 1.0 + v if top < 0x3C9 else y  # glibc: 1 + x below 2^-54
        rare |= top >= 0x408
    if rare:
        for p in range(count):
            v = x[p]
            if not (abs(v) < 512.0):
                out[p] = np.exp(v)


@njit(nogil=True, cache=True)
def _libm_exp(x, out):
    for p in range(x.shape[0]):
        out[p] = np.exp(x[p])


def matches_libm(samples=200_000, seed=0):
    """True when exp_array gives np.exp's bits (inside njit, i.e. libm's) on this machine: checked on
    samples values of the ranges the kernels meet (logits minus their row maximum, both signs,
    all magnitudes from 2^-60 to 2^10) and the special values."""
    rng = np.random.default_rng(seed)
    third = samples // 3
    x = np.concatenate([
        -rng.random(third) * 2.0 * rng.choice([1.0, 10.0, 100.0, 1000.0], third),
        rng.choice([-1.0, 1.0], third) * np.exp2(rng.uniform(-60.0, 10.0, third)),
        rng.uniform(-1100.0, 800.0, samples - 2 * third),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 512.0, -512.0, 709.7, -745.2, 2.0**-54, -(2.0**-54)],
    ])
    ours, libm = np.empty_like(x), np.empty_like(x)
    exp_array(x, ours, x.shape[0], TAIL, HEAD, np.empty_like(x), np.empty(x.shape, np.int64))
    _libm_exp(x, libm)
    return bool(np.array_equal(ours.view(np.int64), libm.view(np.int64)))
