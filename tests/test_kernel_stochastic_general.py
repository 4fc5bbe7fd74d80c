"""The general stochastic path's exponentials by `lowlevel.fast_exp`: libm's bits, so the same outputs.

`lowlevel.fast_exp.exp_array` reproduces glibc's exp (its FMA variant) bit for bit; the kernel uses it only
where `matches_libm()` says so. Here: the array exp against numba's np.exp (libm) and against
an extended-precision reference, and the whole kernel with and without it.
"""

import platform
import sys
from pathlib import Path

import numpy as np
import pytest
from covering import names, tiered
from numba import njit

from tokensweep.kernels.lowlevel import fast_exp
from tokensweep.kernels.stochastic import transformer as stochastic
from tokensweep.kernels.stochastic.transformer import ATTENTIONS, OUTPUTS, simulate_stochastic_states


@njit
def libm_exp(x):
    out = np.empty_like(x)
    for p in range(x.shape[0]):
        out[p] = np.exp(x[p])
    return out


def array_exp(x):
    out = np.empty_like(x)
    fast_exp.exp_array(x, out, x.shape[0], fast_exp.TAIL, fast_exp.HEAD, np.empty_like(x),
                       np.empty(x.shape, np.int64))
    return out


def glibc_with_fma():
    """Linux x86-64 with glibc >= 2.28 and a CPU with FMA and AVX2 (glibc runs __exp_fma)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    name, version = platform.libc_ver()
    if name != "glibc" or tuple(int(v) for v in version.split(".")[:2]) < (2, 28):
        return False
    flags = Path("/proc/cpuinfo").read_text().split()
    return "fma" in flags and "avx2" in flags


def sample(rng, size):
    """Exponents as the attention meets them (<= 0, all scales) and both signs, all magnitudes."""
    return np.concatenate([
        -rng.random(size) * rng.choice([1e-3, 1.0, 20.0, 2e3], size),
        rng.choice([-1.0, 1.0], size) * np.exp2(rng.uniform(-70.0, 10.5, size)),
        [0.0, -0.0, np.inf, -np.inf, np.nan, 511.99, -511.99, 512.0, -512.0, 709.78, -745.13,
         -746.0, 710.0, 2.0**-54, -(2.0**-54), 2.0**-55, 1e-300],
    ])


def test_array_exp_is_within_one_ulp_of_the_exact_value():
    x = sample(np.random.default_rng(1), 100_000)
    x = x[np.isfinite(x) & (x < 709.0) & (x > -708.0)]  # normal results
    ours = array_exp(x)
    exact = np.exp(x.astype(np.longdouble))  # 64-bit mantissa on x86-64
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("long double is double here: no extended-precision reference")
    ulp = np.spacing(exact.astype(np.float64))
    assert np.all(np.abs(ours - exact) <= ulp)


def test_array_exp_handles_the_special_values_as_np_exp():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 800.0, -800.0, -1e4, 2.0**-60])
    np.testing.assert_array_equal(array_exp(x), libm_exp(x))


@pytest.mark.skipif(not glibc_with_fma(), reason="the bit-for-bit claim is about glibc's exp on "
                    "x86-64 with FMA (elsewhere the kernel keeps np.exp: matches_libm is False)")
def test_array_exp_gives_libm_bits():
    x = sample(np.random.default_rng(2), 1_000_000)
    np.testing.assert_array_equal(array_exp(x).view(np.int64), libm_exp(x).view(np.int64))
    assert fast_exp.matches_libm()


def run(n, d, attention, beta, x0, value_std=1.0, noise="gaussian"):
    kw = dict(n=n, d=d, beta=beta, value_std=value_std, T=1.0, layers=30,
              checkpoint_layers=np.arange(1, 31), attention=attention, noise=noise,
              x0=None if x0 is None else x0.copy(), draw_batch=4)
    return simulate_stochastic_states([np.random.default_rng([9, i]) for i in range(3)], **kw)


FAST_EXP_AXES = [("n, d", [(3, 4), (8, 16), (9, 3)]), ("attention", ATTENTIONS),
                 ("beta", [0.0, 1.3, 1e3]), ("start", ["drawn", "coincident"])]


@pytest.mark.parametrize(names(FAST_EXP_AXES), tiered(FAST_EXP_AXES))  # pairs quick, all slow
def test_general_path_is_the_same_with_and_without_fast_exp(monkeypatch, n, d, attention, beta,
                                                            start):
    """beta = 1e3 puts exponents beyond -512 (np.exp's own path inside exp_array); coincident
    tokens give exponents exactly 0 (weight 1, as `attention` skips the call)."""
    if not fast_exp.matches_libm():
        pytest.skip("fast_exp does not reproduce this machine's libm exp: the kernel never uses it")
    x0 = None
    if start == "coincident":
        x0 = np.repeat(np.random.default_rng(4).standard_normal((3, 1, d)), n, axis=1)
    monkeypatch.setattr(stochastic, "_FAST_EXP", True)
    fast = run(n, d, attention, beta, x0)
    monkeypatch.setattr(stochastic, "_FAST_EXP", False)
    libm = run(n, d, attention, beta, x0)
    np.testing.assert_array_equal(fast[0].view(np.int64), libm[0].view(np.int64))
    for name in OUTPUTS:
        np.testing.assert_array_equal(fast[1][name], libm[1][name])
