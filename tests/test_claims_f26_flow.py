"""[F26] Lemma 2 (pipeline/report/claims_f26_flow.py): the hybrid model at sigma = 0 is O(h) from the
deterministic flow, judged on tiny cubes computed by the real kernels.

Why each verdict is known: x_i <- N(x_i + h A_i) is a first-order scheme of dx_i/dt = P_x(A_i)
(N(x + h A) = x + h P_x A + O(h^2)), so the sup difference over a fixed horizon shrinks like h;
the same cube with every recorded state after the first turned by a fixed small rotation is off by
a gap that does not shrink with h (slope ~0: fails); sigma > 0 is outside the lemma (hypothesis not
met); one step h cannot show an order (not checked).
"""

from __future__ import annotations

import numpy as np
from test_claims import cube, entry

from tokensweep.pipeline.analysis.stats import stored_spec
from tokensweep.pipeline.plugin import ReportInput
from tokensweep.pipeline.report.claims import FAILS, HOLDS, NOT_MET
from tokensweep.pipeline.report.claims_f26_flow import (
    first_order,
    lemma2,
    order_fit,
    reference_states,
)
from tokensweep.pipeline.store.cube import open_cube
from tokensweep.pipeline.theory import equiangular_gamma

SMALL = {"grid": {"beta": 1.0, "sigma": 0.0, "d": 3, "n": 3, "layers": [20, 40, 80]},
         "time": {"T": 1.0, "checkpoints": 5}, "trajectories": 24}


def checked(check, spec: dict, tmp_path, change=None):
    """`check` on the tiny cube of `spec`, its dataset first passed through `change` where given."""
    store = cube(spec, tmp_path)
    with open_cube(store) as ds:
        ds = ds.compute()
        if change is not None:
            ds = change(ds)
        return check(ReportInput(ds, stored_spec(ds), store.parent, 0.95))


def judged(tmp_path, change=None, **changes):
    return checked(lemma2, entry("fedorov2026-lemma2", **{**SMALL, **changes}), tmp_path, change)


def turned(ds):
    """Every state after the first checkpoint turned by 0.05 rad about e3: a gap no h removes."""
    c, s = np.cos(0.05), np.sin(0.05)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    states = ds.states.values.copy()
    t_axis = ds.states.dims.index("t")
    later = np.moveaxis(states, t_axis, 0)
    later[1:] = later[1:] @ rot.T
    return ds.assign(states=(ds.states.dims, states))


def test_lemma2_holds_on_the_hybrid_at_sigma_zero_and_fails_with_a_gap_no_h_removes(tmp_path):
    held = judged(tmp_path)
    assert held.verdict == HOLDS and held.measured == "1 of 1 cells agree", held
    off = judged(tmp_path, change=turned)
    assert off.verdict == FAILS and off.measured == "0 of 1 cells agree", off


def test_lemma2_needs_sigma_zero_and_several_steps(tmp_path):
    noisy = judged(tmp_path, grid={**SMALL["grid"], "sigma": 0.5})
    assert noisy.verdict == NOT_MET and "σ = 0" in noisy.detail
    one_h = judged(tmp_path, grid={**SMALL["grid"], "layers": [40]})
    assert one_h.verdict.startswith("not checked") and "layers" in one_h.verdict


def test_order_fit_reads_first_and_zeroth_order():
    rng = np.random.default_rng(0)
    h = np.repeat([0.05, 0.025, 0.0125], 20)
    slope, low, high = order_fit(h, 0.5 * h * np.exp(0.1 * rng.standard_normal(h.size)))
    assert low < 1 < high and first_order(low, high)
    slope, low, high = order_fit(h, 0.02 * np.exp(0.1 * rng.standard_normal(h.size)))
    assert abs(slope) < 0.2 and not first_order(low, high)


def test_reference_states_follow_the_equiangular_ode_from_an_orthonormal_start():
    # [GLPR-P] Thm 6.8: from an orthonormal frame every overlap is gamma(t) (theory.equiangular_gamma)
    times = np.array([0.1, 0.5, 1.0, 2.0])
    x0 = np.repeat(np.eye(3)[None, None], 4, axis=1)  # (1 trajectory, 4 checkpoints, 3 tokens, d = 3)
    for attention in ("sa", "usa"):
        ref = reference_states(x0, times, 1.0, attention)
        assert ref.shape == x0.shape and np.allclose(np.linalg.norm(ref, axis=-1), 1, atol=1e-9)
        overlaps = np.einsum("tid,tjd->tij", ref[0], ref[0])[:, [0, 0, 1], [1, 2, 2]]
        gamma = equiangular_gamma(times - times[0], 1.0, 3, attention)
        assert np.abs(overlaps - gamma[:, None]).max() < 1e-8
