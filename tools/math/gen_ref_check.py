#!/usr/bin/env python3
"""Writes tests/math_data/ref_check.txt: mpmath values (as double-double hi/lo bit patterns) that
the test `reference_self_check` compares the double-double reference of tests/math_ulp/dd_ref.rs against.

Usage (from the scratch crate): .venv/bin/python tools/gen_ref_check.py
"""
import os
import random
import struct

import mpmath as mp

mp.mp.dps = 60


def bits(v):
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def dd(v):
    hi = float(v)
    lo = float(v - mp.mpf(hi))
    return hi, lo


FUNCS = {
    "exp": mp.exp,
    "expm1": mp.expm1,
    "log": mp.log,
    "log1p": mp.log1p,
    "sin": mp.sin,
    "cos": mp.cos,
    "tan": mp.tan,
    "tanh": mp.tanh,
    "sigmoid": lambda x: 1 / (1 + mp.exp(-x)),
    "erf": mp.erf,
}

POINTS = {
    "exp": ([-600.0, -300.5, -50.3, -1.0, -0.3, -1e-10, 1e-10, 0.3, 1.0, 10.7, 88.7, 300.3,
             709.7], (-600, 709)),
    "expm1": ([1e-200, -1e-200, 1e-20, -1e-20, 1e-8, -1e-8, 1e-3, -1e-3, 0.3, -0.3, 0.69, -0.69,
               1.0, -1.0, 5.0, 30.0, 700.0, -40.0], (-40, 40)),
    "log": ([1e-320, 1e-200, 1e-3, 0.5, 0.9999999, 1.0000001, 1 + 2.0 ** -52, 1 - 2.0 ** -53,
             2.0, 10.0, 1e300, 1.7e308], (0.01, 100)),
    "log1p": ([1e-200, -1e-200, 1e-20, -1e-20, 1e-8, -1e-8, 0.3, -0.3, -0.9, -0.999999, 0.5, 1.0,
               10.0, 1e10, 1e300], (-0.99, 100)),
    "sin": ([1e-200, 1e-10, 0.5, 1.0, 1.5707963267948966, 3.141592653589793, 10.0, 100.0, 1e4,
             1e6, 1e9, 355.0, 103993.0, -2.0], (-1e5, 1e5)),
    "cos": ([1e-200, 1e-10, 0.5, 1.0, 1.5707963267948966, 3.141592653589793, 10.0, 100.0, 1e4,
             1e6, 1e9, 355.0, 103993.0, -2.0], (-1e5, 1e5)),
    "tan": ([1e-200, 1e-10, 0.5, 1.0, 1.5707963267948966, 3.141592653589793, 10.0, 100.0, 1e4,
             1e6, 1e9, 355.0, 103993.0, -2.0, 0.7853981633974483], (-1e5, 1e5)),
    "tanh": ([1e-200, -1e-200, 1e-8, 0.1, 0.5, 0.55, 1.0, 5.0, 10.0, 19.0, 20.0, -3.0], (-20, 20)),
    "sigmoid": ([-600.0, -50.0, -10.0, -1.0, -1e-8, 0.0, 1e-8, 1.0, 10.0, 36.0, 40.0, 50.0],
                (-600, 50)),
    "erf": ([1e-200, 1e-8, 0.1, 0.5, 0.9, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 5.9, 6.0, -2.5], (-6, 6)),
}


def main():
    rnd = random.Random(1234)
    lines = ["# name x_bits value_hi_bits value_lo_bits (mpmath, 60 digits); "
             "written by tools/gen_ref_check.py"]
    for name, f in FUNCS.items():
        fixed, (a, b) = POINTS[name]
        xs = list(fixed) + [rnd.uniform(a, b) for _ in range(15)]
        for x in xs:
            v = f(mp.mpf(x))
            if v == 0:
                continue
            hi, lo = dd(v)
            lines.append(f"{name} {bits(x):016x} {bits(hi):016x} {bits(lo):016x}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        "ref_check.txt")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", os.path.normpath(path), len(lines) - 1, "values")


if __name__ == "__main__":
    main()
