"""Sharp configurations that the repulsive flow V = -I settles on ([GLPR-P] section 9.1).

With V = -I the interaction energy E_beta decreases along trajectories (Lemma 3.7), so generic
starts settle on minimisers of H_beta[C] = e^beta / (2 n^2 beta) sum_{x, x'} e^{-beta |x - x'|^2 / 2}
over n-point sets C of S^(d-1). Two families are known in closed form (Cohn-Kumar, [GLPR-P]
Theorem 9.2):

* n <= d + 1: the regular simplex, every pairwise overlap -1/(n - 1). It minimises any convex
  increasing function of the overlaps, since sum_{i != j} <x_i, x_j> = |sum x_i|^2 - n >= -n puts
  the mean overlap at least -1/(n - 1) (Jensen), with equality only when all overlaps are equal;
  so overlap_max = -1/(n - 1) alone certifies the simplex.
* n = 2d: the cross-polytope {+-e_k}, overlaps -1 (antipodes) and 0 (the rest); a sharp
  configuration (a spherical 3-design with two inner products).

Elsewhere (e.g. n = 5 in d = 3) no closed form is stated: `sharp_overlaps` answers None.

>>> sharp_overlaps(4, 3), sharp_overlaps(6, 3), sharp_overlaps(5, 3)
((-0.3333333333333333,), (-1.0, 0.0), None)
"""

from __future__ import annotations

__all__ = ["sharp_overlaps"]


def sharp_overlaps(n: int, d: int) -> tuple[float, ...] | None:
    """The distinct pairwise overlaps of the sharp configuration of n points on S^(d-1), ascending;
    None where none is known in closed form (module docstring)."""
    n, d = int(n), int(d)
    if n < 2 or d < 2:
        raise ValueError(f"n={n}, d={d}: a configuration needs n >= 2 points on S^(d-1), d >= 2")
    if n <= d + 1:
        return (-1.0 / (n - 1),)
    if n == 2 * d:
        return (-1.0, 0.0)
    return None
