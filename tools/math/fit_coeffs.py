#!/usr/bin/env python3
"""Fits every polynomial the expansions use and writes src/math/coeffs.rs.

Usage (from the scratch crate):  .venv/bin/python tools/math/fit_coeffs.py [NAME ...]
With names, only those fits run and are printed (exploration); without, all run and
src/math/coeffs.rs is rewritten. Needs mpmath. Each fit is a weighted minimax (Remez) fit in mpmath
followed by rounding of the coefficients to the target format, highest power first, refitting
the lower ones after each rounding (tools/remez.py). The weight makes the minimised quantity the
error of the final function (relative, or absolute for erf near 1), not of the polynomial alone.
"""
import json
import multiprocessing
import os
import sys

import mpmath as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remez import fit, log2, round_to  # noqa: E402

mp.mp.dps = 60

LN2 = mp.log(2)
PI = mp.pi
# Reduced-argument intervals, widened a little for the rounding of n and r.
W = mp.mpf("1.0005")


# Expansion point of erf's large-argument polynomial (the middle of its interval).
ERF_CENTER = {"f32": 2.465, "f64": 3.465}


# f32 trig kernels' reach (see fits()).
PI4_F32 = PI / 4 + mp.mpf("0.04")


def sq(v):
    return v * v


# name -> (doc, prec, g, w, a, b, powers, variable note)
def fits():
    F = {}

    # exp(r) = 1 + r + r^2 Q(r), |r| <= ln2/2: relative error of exp.
    def g_exp(r):
        return (mp.exp(r) - 1 - r) / r ** 2

    def w_exp(r):
        return r ** 2 / mp.exp(r)

    F["EXP_F32"] = ("exp(r) = 1 + r + r^2 Q(r) on |r| <= ln2/2; relative error of exp",
                    "f32", g_exp, w_exp, -LN2 / 2 * W, LN2 / 2 * W, list(range(5)))
    F["EXP_F64"] = ("exp(r) = 1 + r + r^2 Q(r) on |r| <= ln2/2; relative error of exp",
                    "f64", g_exp, w_exp, -LN2 / 2 * W, LN2 / 2 * W, list(range(11)))

    # expm1(r) = r + r^2 Q(r), |r| <= ln2: relative error of expm1.
    def g_em1(r):
        return (mp.expm1(r) - r) / r ** 2

    def w_em1(r):
        return r ** 2 / mp.expm1(r)

    F["EXPM1_F32"] = ("expm1(r) = r + r^2 Q(r) on |r| <= ln2; relative error",
                      "f32", g_em1, w_em1, -LN2 * W, LN2 * W, list(range(7)))
    F["EXPM1_F64"] = ("expm1(r) = r + r^2 Q(r) on |r| <= ln2; relative error",
                      "f64", g_em1, w_em1, -LN2 * W, LN2 * W, list(range(13)))

    # log1p(f) = f + f^2 Q(f), f in [2/3 - 1, 4/3 - 1]: relative error.
    def g_log(f):
        return (mp.log1p(f) - f) / f ** 2

    def w_log(f):
        return f ** 2 / mp.log1p(f)

    F["LOG_F32"] = ("log1p(f) = f + f^2 Q(f) on f in [-1/3, 1/3]; relative error",
                    "f32", g_log, w_log, -mp.mpf(1) / 3 * W, mp.mpf(1) / 3 * W, list(range(9)))

    # fdlibm form: log1p(f) = 2s + s R, s = f/(2+f), R(z) = z P(z), z = s^2 <= 0.2^2.
    def g_logs(z):
        s = mp.sqrt(z)
        return (2 * mp.atanh(s) - 2 * s) / s

    F["LOG_F64"] = ("R(z) = z P(z) ~ (2 atanh(s) - 2s)/s, z = s^2, |s| <= 0.2 (fdlibm form); "
                    "absolute error of R (R enters log1p multiplied by s, ~ half the relative error)",
                    "f64", g_logs, lambda z: mp.mpf(1) / 2, mp.mpf(0), sq(mp.mpf("0.2") * W),
                    list(range(1, 8)))

    def g_sin(t):
        r = mp.sqrt(t)
        return (mp.sin(r) - r) / (t * r)

    def w_sin(t):
        r = mp.sqrt(t)
        return t * r / mp.sin(r)

    # pi/2 reduction kernels, |r| <= pi/4: sin(r) = r + r^3 S(r^2), relative error;
    # cos(r) = 1 - r^2/2 + r^4 C(r^2), relative error. In f32 the quadrant q = round(x 2/pi) is
    # computed with 2/pi rounded to f32 (relative error 2^-25), so for |x| up to the fast-path
    # bound 2^20, |r| can exceed pi/4 by up to 2^20 * 2^-25 = 1/32: the f32 kernels are fitted
    # on |r| <= pi/4 + 0.04.
    F["SINK_F32"] = ("sin(r) = r + r^3 S(r^2) on |r| <= pi/4 + 0.04; relative error",
                     "f32", g_sin, w_sin, mp.mpf(0), sq(PI4_F32), list(range(3)))
    F["SINK_F64"] = ("sin(r) = r + r^3 S(r^2) on |r| <= pi/4; relative error",
                     "f64", g_sin, w_sin, mp.mpf(0), sq(PI / 4 * W), list(range(6)))

    def g_cos(t):
        return (mp.cos(mp.sqrt(t)) - 1 + t / 2) / t ** 2

    def w_cos(t):
        return t ** 2 / mp.cos(mp.sqrt(t))

    F["COSK_F32"] = ("cos(r) = 1 - r^2/2 + r^4 C(r^2) on |r| <= pi/4 + 0.04; relative error",
                     "f32", g_cos, w_cos, mp.mpf(0), sq(PI4_F32), list(range(3)))
    F["COSK_F64"] = ("cos(r) = 1 - r^2/2 + r^4 C(r^2) on |r| <= pi/4; relative error",
                     "f64", g_cos, w_cos, mp.mpf(0), sq(PI / 4 * W), list(range(6)))

    # tan(r) = r + r^3 T(r^2), |r| <= pi/4: relative error.
    def g_tan(t):
        r = mp.sqrt(t)
        return (mp.tan(r) - r) / (t * r)

    def w_tan(t):
        r = mp.sqrt(t)
        return t * r / mp.tan(r)

    F["TAN_F32"] = ("tan(r) = r + r^3 T(r^2) on |r| <= pi/4 + 0.04; relative error",
                    "f32", g_tan, w_tan, mp.mpf(0), sq(PI4_F32), list(range(7)))
    F["TAN_F64"] = ("tan(r) = r + r^3 T(r^2) on |r| <= pi/4; relative error",
                    "f64", g_tan, w_tan, mp.mpf(0), sq(PI / 4 * W), list(range(15)))

    # tanh(a) = a + a^3 P(a^2), a <= 0.55: relative error.
    def g_tanh(t):
        r = mp.sqrt(t)
        return (mp.tanh(r) - r) / (t * r)

    def w_tanh(t):
        r = mp.sqrt(t)
        return t * r / mp.tanh(r)

    F["TANH_F32"] = ("tanh(a) = a + a^3 P(a^2) on a <= 0.55; relative error",
                     "f32", g_tanh, w_tanh, mp.mpf(0), sq(mp.mpf("0.55") * W), list(range(5)))
    F["TANH_F64"] = ("tanh(a) = a + a^3 P(a^2) on a <= 0.55; relative error",
                     "f64", g_tanh, w_tanh, mp.mpf(0), sq(mp.mpf("0.55") * W), list(range(11)))

    # erf(a) = a + a P(a^2), a <= 1: relative error.
    def g_erfs(t):
        r = mp.sqrt(t)
        return mp.erf(r) / r - 1

    def w_erfs(t):
        r = mp.sqrt(t)
        return r / mp.erf(r)

    F["ERF_SMALL_F32"] = ("erf(a) = a + a P(a^2) on a <= 1; relative error",
                          "f32", g_erfs, w_erfs, mp.mpf(0), mp.mpf(1) * W, list(range(7)))
    F["ERF_SMALL_F64"] = ("erf(a) = a + a P(a^2) on a <= 1; relative error",
                          "f64", g_erfs, w_erfs, mp.mpf(0), mp.mpf(1) * W, list(range(13)))

    # erf(a) = 1 - exp(-a^2) R(v), v = a - c (c the middle of [1, A]), for 1 <= a <= A:
    # absolute error of erf.
    for name, prec, top, deg in [("ERF_LARGE_F32", "f32", "3.93", 8),
                                 ("ERF_LARGE_F64", "f64", "5.93", 22)]:
        c = ERF_CENTER[prec]

        def g_erfl(v, c=c):
            a = v + c
            return mp.erfc(a) * mp.exp(a * a)

        def w_erfl(v, c=c):
            return mp.exp(-(v + c) ** 2)

        F[name] = (f"erf(a) = 1 - exp(-a^2) R(a - {c}) on 1 <= a <= {top}; absolute error of erf",
                   prec, g_erfl, w_erfl, 1 / W - c, mp.mpf(top) * W - c, list(range(deg + 1)))
    return F


def run_one(name):
    doc, prec, g, w, a, b, powers = fits()[name]
    c, err = fit(g, w, a, b, powers, prec)
    return name, doc, prec, c, log2(err)


def splits():
    """Multi-part constants: each part is the target-format rounding of what is left."""
    out = []

    def parts(v, prec, n, trunc=False):
        ps = []
        rest = mp.mpf(v)
        for _ in range(n):
            p = round_to(rest, prec)
            if trunc and abs(mp.mpf(p)) > abs(rest):
                # toward zero: the next float below
                bits = 24 if prec == "f32" else 53
                e = mp.floor(mp.log(abs(mp.mpf(p)), 2))
                p = round_to(mp.mpf(p) - mp.sign(p) * mp.mpf(2) ** (e - bits + 1), prec)
            ps.append(p)
            rest -= mp.mpf(p)
        return ps

    h, l = parts(LN2, "f32", 2)
    out.append(("LN2_HI_F32", "ln2 = LN2_HI + LN2_LO (f32 parts)", repr(h)))
    out.append(("LN2_LO_F32", "", repr(l)))
    h, l = parts(LN2, "f64", 2)
    out.append(("LN2_HI_F64", "ln2 = LN2_HI + LN2_LO (f64 parts)", repr(h)))
    out.append(("LN2_LO_F64", "", repr(l)))
    # fdlibm's split: a 32-bit head (k * head exact for |k| < 2^21).
    head = float(mp.floor(LN2 * 2 ** 32) / 2 ** 32)
    out.append(("LN2_HI32_F64", "ln2 with 32 significant bits (k * it is exact)", repr(head)))
    out.append(("LN2_HI32_LO_F64", "ln2 - LN2_HI32_F64, rounded", repr(float(LN2 - head))))
    # Truncated parts, all positive: `fma(q, -part, r)` then keeps r = -0 when q = +0, so
    # sin(-0) = -0 survives the reduction.
    out.append(("PIO2_F32", "pi/2 = sum of four positive f32 parts (each what is left, truncated)",
                "[" + ", ".join(repr(p) for p in parts(PI / 2, "f32", 4, True)) + "]"))
    out.append(("PIO2_F64", "pi/2 = sum of three positive f64 parts (each what is left, truncated)",
                "[" + ", ".join(repr(p) for p in parts(PI / 2, "f64", 3, True)) + "]"))
    return out


CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fit_cache.json")


def main():
    """No arguments: fit everything. `--refit NAME...`: refit those, take the others from
    tools/fit_cache.json (written by every run). `--show NAME...`: fit and print only."""
    args = sys.argv[1:]
    all_names = list(fits().keys())
    cache = {}
    if args and args[0] in ("--refit", "--show"):
        mode, names = args[0], args[1:]
        if mode == "--refit" and os.path.exists(CACHE):
            with open(CACHE) as f:
                cache = json.load(f)
    else:
        mode, names = "all", all_names
    with multiprocessing.Pool(2) as pool:
        fresh = pool.map(run_one, names)
    for name, doc, prec, c, e in fresh:
        print(f"{name}: {len(c)} coeffs, max weighted error 2^{e:.2f}", flush=True)
        if mode == "--show":
            print("   ", c)
    if mode == "--show":
        return
    for name, doc, prec, c, e in fresh:
        cache[name] = [doc, prec, c, e]
    missing = [n for n in all_names if n not in cache]
    if missing:
        sys.exit(f"not fitted yet: {missing}")
    with open(CACHE, "w") as f:
        json.dump(cache, f, indent=1)
    results = [(n, *cache[n]) for n in all_names]
    lines = [
        "//! Polynomial coefficients and split constants. GENERATED by tools/math/fit_coeffs.py: do not",
        "//! edit by hand; rerun the script (it rewrites this file).",
        "//!",
        "//! Each polynomial lists its coefficients lowest power first, in the variable noted (Horner",
        "//! in that order). f32 coefficients are exact f32 values written as f64 literals.",
        "",
        "// The split constants' heads equal std's LN_2 / FRAC_PI_2 on purpose; literals are exact.",
        "#![allow(clippy::approx_constant, clippy::excessive_precision)]",
        "",
    ]
    for cname, doc, val in splits():
        if doc:
            lines.append(f"/// {doc}")
        ty = f"[f64; {val.count(',') + 1}]" if val.startswith("[") else "f64"
        lines.append(f"pub(super) const {cname}: {ty} = {val};")
    for prec, c in ERF_CENTER.items():
        lines.append(f"/// Expansion point of ERF_LARGE_{prec.upper()} (R is a polynomial in a - this).")
        lines.append(f"pub(super) const ERF_CENTER_{prec.upper()}: f64 = {c!r};")
    lines.append("")
    for name, doc, prec, c, e in results:
        lines.append(f"/// {doc}.")
        lines.append(f"/// Max weighted error of the rounded fit: 2^{e:.1f}.")
        lines.append(f"pub(super) const {name}: [f64; {len(c)}] = [")
        for x in c:
            lines.append(f"    {float(x)!r},")
        lines.append("];")
        lines.append("")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "math", "coeffs.rs")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
