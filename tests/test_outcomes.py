"""Outcome reductions on hand-made overlap matrices: extremes, class, union-find count, t_hit."""

import numpy as np
import pytest

from tokensweep.kernels.outcomes import (
    ANTIPODAL,
    OUTPUTS,
    SINGLE_CLUSTER,
    UNRESOLVED,
    OutputSpec,
    allocate_outputs,
    classify,
    count_clusters,
    finish_trajectory,
    gram,
    hit_time,
    overlap_extremes,
    record_checkpoint,
)

EPS = 1e-3


def overlaps(n, pairs, fill):
    """Symmetric (n, n) matrix with unit diagonal, `fill` off-diagonal, then pairs {(i, j): v}."""
    g = np.full((n, n), fill, dtype=float)
    np.fill_diagonal(g, 1.0)
    for (i, j), v in pairs.items():
        g[i, j] = g[j, i] = v
    return g


def class_of(g, eps=EPS):
    lo, _, lo_abs = overlap_extremes(g)
    return classify(lo, lo_abs, eps)


def test_extremes_skip_the_diagonal_and_n1():
    g = overlaps(3, {(0, 1): -0.5, (1, 2): 0.2}, 0.9)
    assert overlap_extremes(g) == (-0.5, 0.9, 0.2)
    assert overlap_extremes(np.ones((1, 1))) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    "g, expected",
    [
        (overlaps(2, {}, 1 - EPS), SINGLE_CLUSTER),  # the threshold itself counts
        (overlaps(2, {}, 1 - 2 * EPS), UNRESOLVED),
        (overlaps(2, {}, -1 + EPS), ANTIPODAL),
        (overlaps(2, {}, -1 + 2 * EPS), UNRESOLVED),
        (overlaps(1, {}, 0.0), SINGLE_CLUSTER),
        # two groups at antipodes: {0, 1} and {2, 3}
        (overlaps(4, {(0, 1): 0.9995, (2, 3): 0.9999}, -0.9998), ANTIPODAL),
        # antipodal pair plus a third token in between: not antipodal
        (overlaps(3, {(0, 1): -1.0, (0, 2): 0.0, (1, 2): 0.0}, 0.0), UNRESOLVED),
        # {0, 1} within eps of each other, 2 within eps of their antipode
        (overlaps(3, {(0, 1): 0.9995, (0, 2): -0.9999, (1, 2): -0.9992}, 0.0), ANTIPODAL),
    ],
)
def test_classify(g, expected):
    assert class_of(g) == expected


def test_count_clusters_union_find():
    assert count_clusters(np.ones((1, 1)), EPS) == 1
    assert count_clusters(overlaps(4, {}, 0.0), EPS) == 4
    assert count_clusters(overlaps(4, {}, 1.0), EPS) == 1
    # two groups {0, 2} and {1, 3}, antipodal to each other
    assert count_clusters(overlaps(4, {(0, 2): 1.0, (1, 3): 0.9999}, -1.0), EPS) == 2
    # a chain 0-1-2-3 of near neighbours is one component even though 0 and 3 are far apart
    chain = overlaps(5, {(0, 1): 0.9995, (1, 2): 0.9995, (2, 3): 0.9995}, 0.5)
    assert count_clusters(chain, EPS) == 2  # {0, 1, 2, 3} and {4}
    # merges in an order that needs path compression: (3,4), (2,3), (1,2), (0,4)
    g = overlaps(6, {(3, 4): 1.0, (2, 3): 1.0, (1, 2): 1.0, (0, 4): 1.0}, 0.0)
    assert count_clusters(g, EPS) == 2


def test_record_checkpoint_from_states():
    u = np.array([1.0, 0.0, 0.0])
    x = np.array([u, u, -u, [0.0, 1.0, 0.0]])
    g = np.empty((4, 4))
    gram(x, g)
    np.testing.assert_array_equal(g, x @ x.T)
    out = allocate_outputs(2, 2)
    record_checkpoint(x, EPS, g, out, 1, 0)
    record_checkpoint(x[:3], EPS, np.empty((3, 3)), out, 1, 1)
    assert out.overlap_min[1].tolist() == [-1.0, -1.0] and out.overlap_max[1].tolist() == [1.0, 1.0]
    assert out.cluster_class[1].tolist() == [UNRESOLVED, ANTIPODAL]
    assert out.n_clusters[1].tolist() == [3, 2]
    assert np.isnan(out.overlap_min[0]).all()  # row 0 untouched


def test_unreached_checkpoints_keep_the_missing_values():
    """A trajectory that fails after checkpoint 1 of 4: NaN overlaps, class 0, 0 clusters from
    checkpoint 2 on, nonfinite, t_hit NaN; a finished one gets its t_hit."""
    out = allocate_outputs(2, 4)
    x = np.array([[1.0, 0.0], [1.0, 0.0]])
    for r, reached in ((0, 2), (1, 4)):
        for c in range(reached):
            record_checkpoint(x, EPS, np.empty((2, 2)), out, r, c)
    times = np.array([0.1, 0.2, 0.3, 0.4])
    finish_trajectory(out, 0, False, times)
    finish_trajectory(out, 1, True, times)
    assert out.overlap_min[0, :2].tolist() == [1.0, 1.0]
    assert np.isnan(out.overlap_min[0, 2:]).all() and np.isnan(out.overlap_max[0, 2:]).all()
    assert out.cluster_class[0].tolist() == [1, 1, 0, 0]
    assert out.n_clusters[0].tolist() == [1, 1, 0, 0]
    assert out.nonfinite.tolist() == [True, False]
    np.testing.assert_equal(out.t_hit, [np.nan, 0.1])


@pytest.mark.parametrize(
    "cls, expected",
    [
        ([0, 1, 1, 1], 0.2),
        ([1, 1, 1, 1], 0.1),
        ([1, 0, 1, 2], 0.4),  # last checkpoint only
        ([2, 2, 0, 2], 0.4),  # an unresolved interlude restarts the clock
        ([1, 2, 2, 2], 0.2),
        ([1, 1, 1, 0], np.nan),  # final class unresolved
        ([0, 0, 0, 0], np.nan),
    ],
)
def test_hit_time(cls, expected):
    times = np.array([0.1, 0.2, 0.3, 0.4])
    got = hit_time(np.array(cls, dtype=np.int8), times)
    np.testing.assert_equal(got, expected)


def test_output_specs_cf_attributes():
    spec = OUTPUTS["cluster_class"]
    assert spec.attrs()["flag_values"] == [0, 1, 2]
    assert spec.attrs()["flag_meanings"] == "unresolved single_cluster antipodal"
    assert {k for k, s in OUTPUTS.items() if s.per_checkpoint} == {
        "overlap_min", "overlap_max", "cluster_class", "n_clusters"}
    arrays = allocate_outputs(5, 3)
    names = list(arrays._asdict())
    assert names[:len(OUTPUTS)] == list(OUTPUTS)
    # then the observables recorded on request (`observables`): empty along t unless asked for
    assert all(getattr(arrays, k).shape[:2] == (5, 0)
               for k in names[len(OUTPUTS):] if k != "direction")
    assert arrays.n_clusters.shape == (5, 3) and arrays.n_clusters.dtype == np.int16
    assert arrays.t_hit.shape == (5,) and arrays.nonfinite.dtype == bool
    missing = {k: s.missing for k, s in OUTPUTS.items()}
    assert missing["cluster_class"] == 0 and missing["nonfinite"] is False
    assert np.isnan(missing["overlap_min"]) and np.isnan(arrays.t_hit).all()
    # a NaN default missing value does not break equality (specs are compared by the pipeline)
    assert OutputSpec(True, "float64", "x", "1") == OutputSpec(True, "float64", "x", "1")
