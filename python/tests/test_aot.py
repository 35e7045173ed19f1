"""Ahead of time from Python: the object kiln writes, linked and called from C, gives what
the compiled function gives; the function's state as a dict."""

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import kiln


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to link the object")
def test_an_object_linked_into_a_shared_library_matches_the_jit(tmp_path):
    x = kiln.tensor("x", "float32", (3, 4))
    b = kiln.tensor("b", "float32", (4,))
    y = kiln.tanh(x * 2 + b).sum(axis=1)
    symbol = kiln.aot([x, b], y, tmp_path / "f.o", header=tmp_path / "f.h", symbol="rowsum")
    assert symbol == "rowsum"
    assert "int32_t rowsum(const float *x, const float *b, float *out0);" in (tmp_path / "f.h").read_text()
    lib = tmp_path / "libf.so"
    subprocess.run(["cc", "-shared", str(tmp_path / "f.o"), "-lm", "-o", str(lib)], check=True)
    f = ctypes.CDLL(str(lib)).rowsum
    f.restype = ctypes.c_int32
    xv = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    bv = np.linspace(-1, 1, 4, dtype=np.float32)
    out = np.zeros(3, np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
    assert f(ptr(xv), ptr(bv), ptr(out)) == 0
    np.testing.assert_array_equal(out, kiln.function([x, b], y)(xv, bv))


def test_a_bad_graph_ahead_of_time_is_a_kiln_error(tmp_path):
    x = kiln.vector("x")
    with pytest.raises(kiln.KilnError):
        kiln.aot([x], x + 1, tmp_path / "f.o", target="sparc-sun-solaris")
    assert not (tmp_path / "f.o").exists()


def test_state_is_a_dict_of_the_shared_values_and_the_call_count():
    w = kiln.shared(np.array([1.0, 2.0]), name="w")
    n = kiln.shared(np.int64(0), name="n")
    f = kiln.function([], w.sum(), updates=[(w, w * 2), (n, n + 1)])
    f()
    state = f.state()
    assert sorted(state) == ["calls", "shared/n", "shared/w"]
    np.testing.assert_array_equal(state["shared/w"], [2.0, 4.0])
    assert int(state["shared/n"]) == 1 and int(state["calls"]) == 1
