"""BLAS gemm on blocks of arrays from numba code: the Gram matrix's upper triangle.

numba's `np.dot` multiplies whole contiguous arrays. `lowlevel.gemm` calls the same BLAS routine
(`numba_xxgemm`, numba's helper over scipy's OpenBLAS, the one `np.dot` calls, found by symbol so
that callers stay cacheable) on sub-blocks given by pointers and leading dimensions.

`gram_upper(xt, g)`: G = xt^T xt for xt (d, n) row-major, only the blocks of 8 rows from their
first column on (rows r0..r0+7, columns r0..n-1): 5/8 of the flops at n = 32 (1 - 3/8 as n grows
by 8s). Each entry is the same BLAS dot product as in the full product: the same bits where
OpenBLAS's kernel for the CPU accumulates every entry as one fused-multiply-add chain over k
whatever the block (Intel CPUs; float64 on AMD EPYC), else within the rounding bound of a dot
product (float32 on AMD EPYC: up to 739 ulp of a cancelled entry at n = d = 32; checked in
tests/test_kernel_sphere_flow.py against `np.dot` on many shapes).
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas, get_blas_kind

from .. import cache  # noqa: F401  (selects numba's cache folder before anything is decorated)

BLOCK = 8  # rows per block of `gram_upper` (the exponentials' vector width, `sphere.symmetric`)


@intrinsic
def _xxgemm(typingctx, transa, transb, m, n, k, a, lda, b, ldb, c, ldc, proto):
    """Column-major C (m, n) <- op(A) op(B), alpha = 1, beta = 0 (BLAS dgemm / sgemm by the
    dtype of the array proto). transa, transb: 0 ('n') or 1 ('t'); a, b, c: addresses (intp);
    lda, ldb, ldc: leading dimensions in elements."""
    ensure_blas()
    if not isinstance(proto, types.Array):
        return None
    kind = get_blas_kind(proto.dtype, "gemm")
    sig = types.int32(transa, transb, m, n, k, a, lda, b, ldb, c, ldc, proto)

    def codegen(context, builder, signature, args):
        char = ir.IntType(8)
        voidp = cgutils.voidptr_t
        intp = context.get_value_type(types.intp)
        fnty = ir.FunctionType(ir.IntType(32), [char, char, char, intp, intp, intp, voidp, voidp,
                                                intp, voidp, intp, voidp, voidp, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        dtype = context.get_value_type(proto.dtype)
        alpha = cgutils.alloca_once_value(builder, ir.Constant(dtype, 1.0))
        beta = cgutils.alloca_once_value(builder, ir.Constant(dtype, 0.0))

        def trans(v):  # 0 -> 'n', else 't'
            return builder.select(builder.icmp_signed("==", v, ir.Constant(v.type, 0)),
                                  ir.Constant(char, ord("n")), ir.Constant(char, ord("t")))

        def size(v, ty):
            return context.cast(builder, v, ty, types.intp)

        def ptr(v, ty):
            return builder.inttoptr(size(v, ty), voidp)

        ta, tb, mm, nn, kk, pa, la, pb, lb, pc, lc, _ = args
        tys = signature.args
        return builder.call(fn, (ir.Constant(char, ord(kind)), trans(ta), trans(tb),
                                 size(mm, tys[2]), size(nn, tys[3]), size(kk, tys[4]),
                                 builder.bitcast(alpha, voidp), ptr(pa, tys[5]), size(la, tys[6]),
                                 ptr(pb, tys[7]), size(lb, tys[8]), builder.bitcast(beta, voidp),
                                 ptr(pc, tys[9]), size(lc, tys[10])))

    return sig, codegen


@njit(nogil=True, cache=True)
def gram_upper(xt, g):
    """g[r, c] = sum_k xt[k, r] xt[k, c] for the rows r of each block of `BLOCK` rows and the
    columns c from the block's first row on (the other entries are not written). xt (d, n) and
    g (n, n): C-contiguous, the same dtype (float64 or float32)."""
    d, n = xt.shape
    size = xt.itemsize
    x0 = xt.ctypes.data
    g0 = g.ctypes.data
    # row-major xt (d, n) is the column-major X (n, d), ld n; row-major g's block (rows r0..r1-1,
    # columns r0..n-1) is the column-major block (rows r0..n-1, columns r0..r1-1) of X X^T
    for r0 in range(0, n, BLOCK):
        r1 = min(r0 + BLOCK, n)
        _xxgemm(0, 1, n - r0, r1 - r0, d, x0 + size * r0, n, x0 + size * r0, n,
                g0 + size * (r0 * n + r0), n, xt)
