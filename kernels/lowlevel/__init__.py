"""Numba building blocks below the dynamics: no model, no outcome, only arithmetic.

- `simd`: eight / sixteen float64 lanes as one LLVM vector inside njit (`Lanes`);
- `vecmath`: fused multiply-add and an exp that vectorises, float64 and float32;
- `fast_exp`: exp over a whole array, bit for bit glibc's libm exp where `matches_libm`;
- `gemm`: BLAS gemm on sub-blocks from numba code (the Gram matrix's upper blocks).

Imports nothing: each module is imported by name.
"""
