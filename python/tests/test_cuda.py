"""The CUDA call path with device arrays, without a GPU.

A child process runs with ``SDFLOW_CUDA_DEVICE=recording``: programs compiled for
``"cuda"`` (by NVRTC, which needs no GPU) load on a device that checks arguments and
records what is enqueued instead of running it. Another runs with
``SDFLOW_CUDA_DEVICE=emulated``: the generated CUDA runs on the host, and device memory
is host memory, so the results are read back and compared with the CPU backend. Device
arrays are objects with a ``__cuda_array_interface__`` or a DLPack capsule over memory
of that device. On a machine with a GPU, CuPy arrays take their place (docs/python.md,
scripts/python/cupy_check.py).
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    r'''
    import sys
    import numpy as np
    import sdflow
    from sdflow import _sdflow

    prog = sdflow.load(sys.argv[1])
    try:
        run = prog.compile(backend="cuda")
    except sdflow.SdflowError as e:
        if "NVRTC" in str(e) or "nvrtc" in str(e):
            print("SKIP", e)
            sys.exit(0)
        raise

    class Dev:
        """A device array as another library describes it."""

        def __init__(self, ptr, shape, typestr="<f8", strides=None, stream=None,
                     readonly=False, mask=None):
            self.iface = dict(shape=shape, typestr=typestr, data=(ptr, readonly),
                              strides=strides, version=3, stream=stream, mask=mask)

        @property
        def __cuda_array_interface__(self):
            return self.iface

    n = 10
    u_ptr = _sdflow._device_alloc(n * n * 8)
    out_ptr = _sdflow._device_alloc(n * n * 8)
    u = Dev(u_ptr, (n, n), stream=7)
    out = Dev(out_ptr, (n, n), stream=7)

    done = run(u=u, out=out)
    assert isinstance(done, sdflow.Completion), done
    log = _sdflow._device_log()
    waits = [i for i, c in enumerate(log) if c == "WaitForStream(7)"]
    signals = [i for i, c in enumerate(log) if c == "SignalStream(7)"]
    launches = [i for i, c in enumerate(log) if c.startswith("Launch")]
    assert len(waits) == 1 and len(signals) == 1, log
    assert waits[0] < launches[0] and launches[-1] < signals[0], log
    assert "Synchronize" not in log, log
    assert any(f"Ptr({u_ptr})" in c for c in log), log
    done.wait()
    assert done.done
    done.wait()  # a second wait returns at once

    # Without a stream, nothing is ordered: the caller keeps the arrays until it waits.
    done = run(u=Dev(u_ptr, (n, n)), out=Dev(out_ptr, (n, n)))
    assert _sdflow._device_log().count("WaitForStream(7)") == 1
    done.wait()

    # NumPy arrays still work with a cuda program (copied to the device and back).
    assert run(u=np.zeros((n, n)), out=np.zeros((n, n))) is None

    def refused(kwargs, expected):
        try:
            run(**kwargs)
        except sdflow.CallError as e:
            assert expected in str(e), (expected, str(e))
            return
        raise AssertionError(f"accepted: {kwargs}")

    refused(dict(u=Dev(u_ptr, (n, n), typestr="<f4"), out=out), "'u' is f32, the program needs f64")
    refused(dict(u=Dev(u_ptr, (n, n), typestr=">f8"), out=out),
            "element type '>f8' is not supported")
    refused(dict(u=Dev(u_ptr, (n, n), readonly=True), out=out), "the array is read-only")
    refused(dict(u=Dev(u_ptr, (n, n), mask=object()), out=out), "masked arrays are not supported")
    refused(dict(u=Dev(u_ptr, (n, n), stream=0), out=out), "'stream' is 0")
    refused(dict(u=Dev(u_ptr, (n, n), strides=(8, 12)), out=out),
            "stride 12 (bytes) is not a multiple of the element size 8")
    refused(dict(u=Dev(0x10, (n, n)), out=out), "'u': 0x10 is not in any allocation")
    refused(dict(u=Dev(u_ptr, (n, n)), out=Dev(u_ptr, (n, n))),
            "overlap in memory; pass distinct arrays")
    refused(dict(u=Dev(u_ptr, (n, n)), out=np.zeros((n, n))), "'out' is not on the device")
    refused(dict(u=Dev(u_ptr, (n, n)), out=out, M=3), "'M' is not an argument of the program")
    refused(dict(u=Dev(u_ptr, (n, n)), out=out, N=9), "'u' has extent 10 in dimension 0")
    refused(dict(u=Dev(u_ptr, (n, n))), "missing argument 'out'")

    # DLPack (JAX and others): a capsule with a DLManagedTensor, asked for on stream 1.
    import ctypes

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                    ("deleter", ctypes.c_void_p)]

    capsule_new = ctypes.pythonapi.PyCapsule_New
    capsule_new.restype = ctypes.py_object
    capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

    class DL:
        def __init__(self, ptr, shape, code=2, bits=64, device=2):
            self.extents = (ctypes.c_int64 * len(shape))(*shape)
            self.m = DLManagedTensor()
            t = self.m.dl_tensor
            t.data, t.device_type, t.device_id, t.ndim = ptr, device, 0, len(shape)
            t.code, t.bits, t.lanes = code, bits, 1
            t.shape = self.extents
            self.device, self.streams = device, []

        def __dlpack_device__(self):
            return (self.device, 0)

        def __dlpack__(self, stream=None):
            self.streams.append(stream)
            return capsule_new(ctypes.addressof(self.m), b"dltensor", None)

    du, dout = DL(u_ptr, (n, n)), DL(out_ptr, (n, n))
    before = _sdflow._device_log().count("WaitForStream(1)")
    done = run(u=du, out=dout)
    done.wait()
    assert du.streams == [1] and dout.streams == [1], (du.streams, dout.streams)
    log = _sdflow._device_log()
    assert log.count("WaitForStream(1)") == before + 1, log
    assert log[-1] == "SignalStream(1)" or "SignalStream(1)" in log, log
    refused(dict(u=DL(u_ptr, (n, n), device=1), out=dout),
            "is on DLPack device type 1, not on a CUDA device")
    refused(dict(u=DL(u_ptr, (n, n), bits=16), out=dout),
            "element type (code 2, 16 bits, 1 lanes) is not supported")
    refused(dict(u=DL(u_ptr, (n, 5)), out=dout), "'u' has extent 5 in dimension 1")
    print("OK")
    '''
)


EMULATED = textwrap.dedent(
    r'''
    import ctypes
    import sys
    import numpy as np
    import sdflow
    from sdflow import _sdflow

    prog = sdflow.load(sys.argv[1])
    run = prog.compile(backend="cuda")
    cpu = prog.compile(backend="cpu")

    class Dev:
        def __init__(self, ptr, shape, stream=None):
            self.iface = dict(shape=shape, typestr="<f8", data=(ptr, False), strides=None,
                              version=3, stream=stream)

        @property
        def __cuda_array_interface__(self):
            return self.iface

    class DL:
        """The same memory through DLPack alone (device type 2: CUDA)."""

        def __init__(self, ptr, shape):
            import ctypes as c

            class T(c.Structure):
                _fields_ = [("data", c.c_void_p), ("device_type", c.c_int32),
                            ("device_id", c.c_int32), ("ndim", c.c_int32),
                            ("code", c.c_uint8), ("bits", c.c_uint8), ("lanes", c.c_uint16),
                            ("shape", c.POINTER(c.c_int64)), ("strides", c.POINTER(c.c_int64)),
                            ("byte_offset", c.c_uint64)]

            class M(c.Structure):
                _fields_ = [("t", T), ("ctx", c.c_void_p), ("deleter", c.c_void_p)]

            self.extents = (c.c_int64 * len(shape))(*shape)
            self.m = M()
            self.m.t.data, self.m.t.device_type, self.m.t.ndim = ptr, 2, len(shape)
            self.m.t.code, self.m.t.bits, self.m.t.lanes = 2, 64, 1
            self.m.t.shape = self.extents

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            new = ctypes.pythonapi.PyCapsule_New
            new.restype = ctypes.py_object
            new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
            return new(ctypes.addressof(self.m), b"dltensor", None)

    n = 37
    # Device memory of the emulated device is host memory: NumPy views of it.
    view = lambda p: np.ctypeslib.as_array((ctypes.c_double * (n * n)).from_address(p)).reshape(n, n)
    u_ptr, out_ptr = _sdflow._device_alloc(n * n * 8), _sdflow._device_alloc(n * n * 8)
    view(u_ptr)[:] = np.random.default_rng(3).random((n, n))
    want = np.zeros((n, n))
    cpu(u=view(u_ptr).copy(), out=want)

    done = run(u=Dev(u_ptr, (n, n), stream=7), out=Dev(out_ptr, (n, n), stream=7))
    assert isinstance(done, sdflow.Completion), done
    done.wait()
    assert np.array_equal(view(out_ptr), want), np.abs(view(out_ptr) - want).max()

    view(out_ptr)[:] = 0.0
    run(u=DL(u_ptr, (n, n)), out=DL(out_ptr, (n, n))).wait()
    assert np.array_equal(view(out_ptr), want)

    # Host memory the device did not allocate is not its memory.
    host = np.zeros((n, n))
    try:
        run(u=Dev(host.ctypes.data, (n, n)), out=Dev(out_ptr, (n, n)))
    except sdflow.CallError as e:
        assert "is not memory of the emulated device" in str(e), str(e)
    else:
        raise AssertionError("host memory accepted")
    print("OK")
    '''
)


def run_child(tmp_path, source, device):
    """Runs `source` in a fresh interpreter with SDFLOW_CUDA_DEVICE=`device`, on laplace."""
    script = tmp_path / "child.py"
    script.write_text(source)
    env = dict(os.environ, SDFLOW_CUDA_DEVICE=device)
    return subprocess.run(
        [sys.executable, str(script), str(ROOT / "examples" / "laplace.sdfg.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_device_arrays_are_checked_enqueued_and_ordered_after_their_stream(tmp_path):
    r = run_child(tmp_path, CHILD, "recording")
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    if last.startswith("SKIP"):
        pytest.skip(f"NVRTC is not installed (scripts/install-nvrtc.sh): {last}")
    assert last == "OK", r.stdout + r.stderr


def test_device_arrays_run_on_the_emulated_device_as_on_the_cpu(tmp_path):
    r = run_child(tmp_path, EMULATED, "emulated")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "OK", r.stdout + r.stderr


def test_an_unknown_device_choice_is_a_clear_error(tmp_path):
    source = (
        "import sys, sdflow\n"
        "p = sdflow.load(sys.argv[1])\n"
        "try:\n"
        "    p.compile(backend='cuda')\n"
        "except sdflow.SdflowError as e:\n"
        "    print(e)\n"
    )
    r = run_child(tmp_path, source, "gpu0")
    assert r.returncode == 0, r.stderr
    assert (
        "SDFLOW_CUDA_DEVICE='gpu0': expected a device number, 'emulated' or 'recording'"
        in r.stdout
    ), r.stdout
