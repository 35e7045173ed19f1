"""Weighted minimax (Remez exchange) fitting with mpmath, plus rounding of the coefficients to
f32/f64 one at a time (each rounded coefficient is frozen and the remaining ones are refitted,
as Sollya's fpminimax does in spirit).

fit(g, w, a, b, powers, prec) approximates g(t) on [a, b] by sum(c_k * t**powers[k]) minimising
max |w(t) * (p(t) - g(t))|. It returns the rounded coefficients and the max weighted error of
the rounded polynomial, measured on a dense grid.
"""
import struct

import mpmath as mp

mp.mp.dps = 60


def round_to(v, prec):
    if prec is None:
        return v
    if prec == "f64":
        return float(v)
    # f32: round-to-nearest through the f64 value is exact enough (the f64 value is itself
    # correctly rounded; double rounding can only matter on exact ties, irrelevant here).
    return struct.unpack("f", struct.pack("f", float(mp.mpf(v))))[0]


_TINY = mp.mpf("1e-12")


def _snap(t):
    """Points closer to 0 than 1e-12 are moved to +-1e-12 (see _safe); the polynomial is
    evaluated at the same moved point so that fit and target stay consistent."""
    if abs(t) < _TINY:
        return _TINY if t >= 0 else -_TINY
    return t


def _solve(g, w, powers, ref):
    ref = [_snap(t) for t in ref]
    n = len(powers)
    A = mp.matrix(n + 1, n + 1)
    rhs = mp.matrix(n + 1, 1)
    for i, t in enumerate(ref):
        for k, p in enumerate(powers):
            A[i, k] = t ** p
        A[i, n] = (-1) ** i / abs(w(t))
        rhs[i] = g(t)
    sol = mp.lu_solve(A, rhs)
    return [sol[k] for k in range(n)], sol[n]


def _err(g, w, powers, c, t):
    t = _snap(t)
    p = mp.mpf(0)
    for ck, pk in zip(c, powers):
        p += ck * t ** pk
    return abs(w(t)) * (p - g(t))


def _grid(a, b, m):
    # Chebyshev-distributed: dense near the ends where extrema cluster.
    return [a + (b - a) * (1 - mp.cos(mp.pi * i / (m - 1))) / 2 for i in range(m)]


def _extrema(g, w, powers, c, a, b, m):
    ts = _grid(a, b, m)
    es = [_err(g, w, powers, c, t) for t in ts]
    runs = []  # (t, e) of max |e| in each run of equal sign
    cur = None
    for t, e in zip(ts, es):
        s = e >= 0
        if cur is None or s != cur[0]:
            cur = [s, t, e]
            runs.append(cur)
        elif abs(e) > abs(cur[2]):
            cur[1], cur[2] = t, e
    out = []
    for s, t, e in runs:
        # golden-section refinement of |e| around t
        i = ts.index(t)
        lo = ts[max(i - 1, 0)]
        hi = ts[min(i + 1, len(ts) - 1)]
        f = lambda u: -abs(_err(g, w, powers, c, u))
        gr = (mp.sqrt(5) - 1) / 2
        x1 = hi - gr * (hi - lo)
        x2 = lo + gr * (hi - lo)
        f1, f2 = f(x1), f(x2)
        for _ in range(40):
            if f1 < f2:
                hi, x2, f2 = x2, x1, f1
                x1 = hi - gr * (hi - lo)
                f1 = f(x1)
            else:
                lo, x1, f1 = x1, x2, f2
                x2 = lo + gr * (hi - lo)
                f2 = f(x2)
        tt = (lo + hi) / 2
        ee = _err(g, w, powers, c, tt)
        if abs(ee) < abs(e) or (ee >= 0) != (e >= 0):
            tt, ee = t, e
        out.append((tt, ee))
    return out


def remez(g, w, a, b, powers, iters=40, m=None):
    n = len(powers)
    if n == 0:
        return [], max(abs(w(t) * g(t)) for t in _grid(a, b, 400))
    m = m or max(400, 60 * n)
    # Chebyshev nodes, nudged so that none sits exactly where the weight may vanish (t = 0).
    ref = [a + (b - a) * (1 - mp.cos(mp.pi * (i + mp.mpf('0.5')) / (n + 1) * mp.mpf('0.999'))) / 2
           for i in range(n + 1)]
    c = None
    for _ in range(iters):
        c, E = _solve(g, w, powers, ref)
        ex = _extrema(g, w, powers, c, a, b, m)
        while len(ex) > n + 1:
            if abs(ex[0][1]) < abs(ex[-1][1]):
                ex.pop(0)
            else:
                ex.pop()
        if len(ex) < n + 1:
            break
        errs = [abs(e) for _, e in ex]
        ref = [t for t, _ in ex]
        if (max(errs) - min(errs)) / max(errs) < mp.mpf("1e-6"):
            break
    return c, max(abs(e) for _, e in _extrema(g, w, powers, c, a, b, m))


def _safe(f):
    """Memoised, and evaluated at +-1e-12 instead of anything closer to 0: the fitted functions
    have removable singularities at 0, where their formulas cancel catastrophically."""
    cache = {}

    def h(t):
        t = _snap(t)
        v = cache.get(t)
        if v is None:
            v = cache[t] = f(t)
        return v
    return h


def fit(g, w, a, b, powers, prec, iters=40):
    """Minimax fit of g by sum(c_k t^k), k in `powers`, for the weighted error w * (p - g);
    then the coefficients are rounded to `prec` one at a time, highest power first, the lower
    ones being refitted (Remez again, a Haar system still) after each rounding (f32 only; f64
    coefficients are all rounded at once). Returns
    (rounded coefficients, max weighted error of the rounded polynomial on a dense grid)."""
    g0, w0 = _safe(g), _safe(w)
    # Divide out the lowest power (fit g / t^p0 by t^(k - p0) with weight w |t|^p0): the same
    # problem, but the basis then contains 1, so it is a Haar system even on intervals that
    # contain 0.
    p0 = powers[0]
    g = _safe(lambda t: g0(t) / t ** p0)
    w = _safe(lambda t: abs(w0(t)) * abs(t) ** p0)
    powers = [k - p0 for k in powers]
    fixed = {}
    rest = list(powers)
    if prec == "f64":
        # 53-bit rounding moves the error by far less than the fit's own error: round all at once.
        c, _ = remez(g, w, a, b, rest, iters)
        for pk, ck in zip(rest, c):
            fixed[pk] = round_to(ck, prec)
        rest = []
    while rest:
        def gg(t, fixed=dict(fixed)):
            v = g(t)
            for pk, ck in fixed.items():
                v -= mp.mpf(ck) * t ** pk
            return v

        c, _ = remez(_safe(gg), w, a, b, rest, iters)
        fixed[rest[-1]] = round_to(c[-1], prec)
        rest = rest[:-1]
    coeffs = [fixed[p] for p in powers]
    err = max(abs(_err(g, w, powers, [mp.mpf(x) for x in coeffs], t)) for t in _grid(a, b, 3000))
    return coeffs, err


def log2(x):
    return float(mp.log(x, 2)) if x > 0 else float("-inf")
