"""Python-side arguments of `sphere.flow.simulate_sphere_flow`: the weight matrices' names and given
arrays resolved to ensemble codes and fixed (H, d, d) matrices, and the time-varying schedules
(`ensembles.TIME_VARYING` presets or {amp, omega, phase, absolute}) resolved to arrays. Plain
NumPy, validation with one message per bad value (no numba, no I/O)."""

import numpy as np

from .drift import TV_ABS_COS, TV_COS, TV_NONE, V_GENERAL, V_IDENTITY, V_MINUS_IDENTITY

_NAMES_FIX = "use one of {}"


def matrix_arg(matrices, key, heads, d):
    arr = np.asarray(matrices[key], dtype=np.float64)
    if arr.shape == (d, d) and heads == 1:
        arr = arr[None]
    if arr.shape != (heads, d, d) or not np.all(np.isfinite(arr)):
        raise ValueError(
            f"matrices[{key!r}] has shape {arr.shape}, but (heads, d, d) = ({heads}, {d}, {d}) "
            "finite entries are needed (a (d, d) array is accepted when heads = 1)"
        )
    return arr.copy()


def resolve_weights(heads, d, qk, value, matrices, preset):
    """(q, k, v (H, d, d) fixed parts, (q_kind, k_kind, v_kind), qk_identity, v_code)."""
    from tokensweep.kernels import ensembles as ens

    if qk not in ens.QK_ENSEMBLES:
        raise ValueError(f"qk = {qk!r} is unknown: " + _NAMES_FIX.format(ens.QK_ENSEMBLES))
    if value not in ens.VALUE_ENSEMBLES:
        raise ValueError(f"value = {value!r} is unknown: " + _NAMES_FIX.format(ens.VALUE_ENSEMBLES))
    matrices = dict(matrices or {})
    unknown = set(matrices) - {"Q", "K", "V"}
    if unknown:
        raise ValueError(f"matrices has keys {sorted(unknown)}: only 'Q', 'K', 'V' are understood")
    eye = np.broadcast_to(np.eye(d), (heads, d, d)).copy()
    q, k, v = eye.copy(), eye.copy(), eye.copy()
    q_kind = k_kind = v_kind = ens.FIXED
    if preset is not None and preset["P"] is not None:
        if qk != "identity" or "Q" in matrices or "K" in matrices:
            raise ValueError("time_varying preset fixes Q^T K = P': leave qk='identity' and give "
                             "no matrices['Q'] / matrices['K']")
        k = np.array(preset["P"], dtype=np.float64)
    elif qk == "ginibre":
        q_kind = k_kind = ens.GINIBRE
    elif qk != "identity":
        k_kind = ens.ENSEMBLE_CODES[qk]
    if "Q" in matrices:
        q, q_kind = matrix_arg(matrices, "Q", heads, d), ens.FIXED
    if "K" in matrices:
        k, k_kind = matrix_arg(matrices, "K", heads, d), ens.FIXED
    if preset is not None and preset["V"] is not None:
        if value != "identity" or "V" in matrices:
            raise ValueError("time_varying preset fixes V: leave value='identity', no matrices['V']")
        v = np.array(preset["V"], dtype=np.float64)
    elif "V" in matrices:
        v = matrix_arg(matrices, "V", heads, d)
    elif value == "minus_identity":
        v = -eye
    elif value == "qk":
        v_kind = ens.QK
    elif value != "identity":
        v_kind = ens.ENSEMBLE_CODES[value]
    qk_identity = q_kind == ens.FIXED and k_kind == ens.FIXED and np.all(q == eye) and np.all(k == eye)
    if v_kind != ens.FIXED and not (v_kind == ens.QK and qk_identity):
        v_code = V_GENERAL
    elif np.all(v == eye):
        v_code = V_IDENTITY
    elif np.all(v == -eye):
        v_code = V_MINUS_IDENTITY
    else:
        v_code = V_GENERAL
    return q, k, v, (q_kind, k_kind, v_kind), bool(qk_identity), v_code


def resolve_time_varying(time_varying, heads, d):
    """(preset or None, tv_mode, amp, omega, phase (H, d), random_frequencies)."""
    from tokensweep.kernels.ensembles import TIME_VARYING

    zeros = np.zeros((heads, d))
    if time_varying is None:
        return None, TV_NONE, zeros, zeros.copy(), zeros.copy(), False
    if isinstance(time_varying, str):
        if time_varying not in TIME_VARYING:
            raise ValueError(f"time_varying = {time_varying!r} is unknown: use None, a dict "
                             f"{{'amp', 'omega', 'phase', 'absolute'}} or one of {tuple(TIME_VARYING)}")
        preset = TIME_VARYING[time_varying]
        for name, want, got in (("heads", preset["heads"], heads), ("d", preset["d"], d)):
            if want is not None and want != got:
                raise ValueError(f"time_varying = {time_varying!r} needs {name} = {want}, got {got}")
        mode = TV_ABS_COS if preset["absolute"] else TV_COS
        if preset["random"]:
            return preset, mode, np.full((heads, d), 2.0), zeros.copy(), zeros.copy(), True
        amp, omega, phase = (np.array([s[i] for s in preset["schedule"]], dtype=np.float64)
                             for i in range(3))
        return preset, mode, amp, omega, phase, False
    spec = dict(time_varying)
    arrays = []
    for key in ("amp", "omega", "phase"):
        arr = np.broadcast_to(np.asarray(spec.pop(key, 0.0), dtype=np.float64), (heads, d)).copy()
        arrays.append(arr)
    mode = TV_ABS_COS if spec.pop("absolute", False) else TV_COS
    if spec:
        raise ValueError(f"time_varying has keys {sorted(spec)}: only amp, omega, phase, absolute")
    return None, mode, *arrays, False
