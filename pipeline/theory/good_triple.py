r"""[GLPR-E] Definition 1 on random matrices: how often a real Ginibre V meets its first condition.

Definition 1 calls (Q, K, V) a good triple when (i) the eigenvalue of V of largest modulus is real,
positive and simple, lambda_1(V) > |lambda_2(V)| >= ... >= |lambda_d(V)|, and (ii)
<Q phi_1, K phi_1> > 0 on the line ker(V - lambda_1 I). Line 199 says this is generic: "a constant
fraction (about 14 %) of matrices from the real Ginibre ensemble in dimension d = 128" meet it, a
fraction that vanishes, very slowly, as d grows [RS14]. The sentence is about V, condition (i) (the
sentences before it: Perron-Frobenius for V with positive entries, ALBERT's value matrices); with Q, K Ginibre as well and
independent of V, Q phi_1 and K phi_1 are independent N(0, |phi_1|^2 I) vectors, so (ii) holds with
probability exactly 1/2 and the share of good triples is half that of V.

`ginibre_leading_share(d, draws, seed)` counts the draws V (i.i.d. N(0, 1) entries: the scale is
irrelevant to (i)) that meet (i); `leading_real_positive_simple` is (i) on computed eigenvalues, with
a relative tolerance of 1e-9 (LAPACK returns a real eigenvalue of a real
matrix with imaginary part exactly 0; a complex pair ties in modulus, so fails strictness).
"""

from __future__ import annotations

import numpy as np

__all__ = ["GINIBRE_D", "GINIBRE_SHARE", "leading_real_positive_simple", "ginibre_leading_share",
           "eigenvalues_pooled", "good_triple"]

GINIBRE_D, GINIBRE_SHARE = 128, 0.14  # [GLPR-E] line 199: "about 14 %" at d = 128
CHUNK = 200  # matrices drawn at a time (26 MB at d = 128)
THREADS = 2  # pool threads for LAPACK (at least 2: run_blocks caps OpenBLAS's threads only in a pool)


def leading_real_positive_simple(eigenvalues, rtol: float = 1e-9) -> np.ndarray:
    """Condition (i) of Definition 1 per row of `eigenvalues` (..., d): the eigenvalue of largest
    modulus is real, positive and strictly larger in modulus than every other.

    >>> leading_real_positive_simple(np.array([[2.0, -1.0, 0.5], [-2.0, 1.0, 0.5],
    ...                                        [1 + 2j, 1 - 2j, 0.1], [1.0, 1.0, 0.0]]))
    array([ True, False, False, False])
    """
    ev = np.asarray(eigenvalues, complex)
    modulus = np.abs(ev)
    order = np.argsort(-modulus, axis=-1)
    top = np.take_along_axis(ev, order[..., :1], -1)[..., 0]
    second = np.take_along_axis(modulus, order[..., 1:2], -1)[..., 0] if ev.shape[-1] > 1 else 0.0
    tol = rtol * np.maximum(1.0, np.abs(top))
    return (np.abs(top.imag) <= tol) & (top.real > 0) & (second < np.abs(top) - tol)


def ginibre_leading_share(d: int, draws: int, seed: int) -> int:
    """How many of `draws` real Ginibre d x d matrices (generator `seed`, drawn in order, so the
    count does not depend on the threads) meet condition (i). LAPACK runs on `THREADS` pool threads
    of one OpenBLAS thread each (`kernels.blocks.run_blocks`): OpenBLAS's own threads on these small
    problems spin and cost ~8 times the CPU under load.

    >>> ginibre_leading_share(1, 1000, 0) in range(430, 571)  # d = 1: V > 0, probability 1/2
    True
    """
    rng = np.random.default_rng(seed)
    count = 0
    for start in range(0, draws, CHUNK):
        V = rng.standard_normal((min(CHUNK, draws - start), d, d))
        count += int(leading_real_positive_simple(eigenvalues_pooled(V)).sum())
    return count


def eigenvalues_pooled(V: np.ndarray) -> np.ndarray:
    """The eigenvalues of each matrix of the stack V (m, d, d), (m, d) complex; V is overwritten."""
    from scipy.linalg import eigvals

    from ...kernels.blocks import run_blocks

    ev = np.empty(V.shape[:2], complex)

    def work(r0, r1):
        for r in range(r0, r1):
            ev[r] = eigvals(V[r], overwrite_a=True, check_finite=False)
    run_blocks(len(V), max(1, -(-len(V) // (4 * THREADS))), THREADS, work)
    return ev


def good_triple(V, Q=None, K=None) -> bool:
    """Definition 1 for one (Q, K, V) (Q, K None: the identity): condition (i) and
    <Q phi_1, K phi_1> > 0 for the eigenvector phi_1 of lambda_1.

    >>> good_triple(np.diag([1.0, -0.5])), good_triple(np.diag([1.0, 0.5]), np.eye(2), -np.eye(2))
    (True, False)
    >>> good_triple([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.5]])  # leading pair +-i
    False
    >>> good_triple(np.diag([1.0, -0.5]), np.eye(2), np.eye(2)), good_triple(np.diag([1.0, -2.0]), np.eye(2), np.eye(2))
    (True, False)
    >>> good_triple(np.diag([1.0, 0.5]), np.eye(2), -np.eye(2))
    False
    """
    V = np.asarray(V, float)
    Q, K = (np.eye(len(V)) if m is None else np.asarray(m, float) for m in (Q, K))
    values, vectors = np.linalg.eig(V)
    if not leading_real_positive_simple(values):
        return False
    phi = np.real(vectors[:, np.argmax(np.abs(values))])
    return bool((Q @ phi) @ (K @ phi) > 0)
