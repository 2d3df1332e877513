"""ONNX converters of DFT and STFT against numpy's FFT (an oracle independent of ONNX's
reference op, which the converters take their matrices from): every variant of the op, the
device work it becomes (one GEMM between transposes), and the errors of a bad node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx_one_node import node_model, run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(17)


def _signal(shape, parts):
    return RNG.standard_normal((*shape, parts)).astype(np.float32)


def _complex(x):
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _parts(z):
    return np.stack([z.real, z.imag], axis=-1)


def _dft_model(x, opset, axis, length, **attrs):
    """A DFT node over x: the axis an attribute before opset 20, an input since."""
    values = {"x": x, "n": None if length is None else np.array(length, np.int64)}
    if opset >= 20:
        values["axis"] = np.array(axis, np.int64)
    else:
        attrs["axis"] = axis
    return node_model("DFT", values, {"x"}, opset, **attrs)


def _close(got, want):
    assert got.dtype == np.float32 and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize(("axis", "length"), [(1, None), (2, 4), (-2, 9), (1, 7)])
@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (0, 1), (1, 0)])
def test_dft_matches_numpy(ctx, opset, parts, axis, length, inverse, onesided):
    x = _signal((2, 6, 5), parts)
    model = _dft_model(x, opset, axis, length, inverse=inverse, onesided=onesided)
    (got,) = run(ctx, model, {"x": x})
    at = axis % 4
    z = (np.fft.ifft if inverse else np.fft.fft)(_complex(x), n=length, axis=at)
    if onesided:
        n = z.shape[at]
        z = np.take(z, np.arange(n // 2 + 1), axis=at)
    _close(got, _parts(z))


@pytest.mark.parametrize("length", [None, 8, 9])
def test_the_inverse_of_a_one_sided_spectrum_is_real(ctx, length):
    spectrum = _parts(np.fft.rfft(RNG.standard_normal((3, 8)), axis=1)).astype(np.float32)
    model = _dft_model(spectrum, 20, 1, length, inverse=1, onesided=1)
    (got,) = run(ctx, model, {"x": spectrum})
    want = np.fft.irfft(_complex(spectrum), n=length, axis=1)[..., None]
    _close(got, want)


def test_a_dft_is_one_gemm_between_transposes():
    x = _signal((4, 16, 3), 2)
    ops = [n.op for n in from_onnx(_dft_model(x, 20, 1, None)).nodes]
    assert ops.count("gemm") == 1 and set(ops) <= {"gemm", "transpose", "reshape"}
    # along the last axis before the parts there is nothing to move
    ops = [n.op for n in from_onnx(_dft_model(x, 20, 2, None)).nodes]
    assert ops.count("gemm") == 1 and "transpose" not in ops


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("with_window", [False, True])
def test_stft_matches_numpy(ctx, parts, onesided, with_window):
    signal, step, length = _signal((2, 50), parts), 6, 16
    window = np.hanning(length).astype(np.float32) if with_window else None
    values = {"x": signal, "step": np.array(step, np.int64), "w": window,
              "n": np.array(length, np.int64)}  # fmt: skip
    model = node_model("STFT", values, {"x"}, 17, onesided=onesided)
    (got,) = run(ctx, model, {"x": signal})
    frames = 1 + (50 - length) // step
    z = _complex(signal)
    framed = np.stack([z[:, f * step : f * step + length] for f in range(frames)], axis=1)
    spectra = np.fft.fft(framed * (window if with_window else 1.0), axis=-1)
    if onesided:
        spectra = spectra[..., : length // 2 + 1]
    _close(got, _parts(spectra))


def test_stft_frame_length_defaults_to_the_window_or_the_signal(ctx):
    signal = _signal((1, 20), 1)
    window = np.hamming(8).astype(np.float32)
    values = {"x": signal, "step": np.array(4, np.int64), "w": window}
    (got,) = run(ctx, node_model("STFT", values, {"x"}, 17), {"x": signal})
    assert got.shape == (1, 4, 5, 2)  # (20 - 8) // 4 + 1 frames of 8 // 2 + 1 bins
    values = {"x": signal, "step": np.array(4, np.int64)}
    (got,) = run(ctx, node_model("STFT", values, {"x"}, 17), {"x": signal})
    _close(got, _parts(np.fft.rfft(signal[..., 0], axis=1))[:, None])


def _refusal(model, error=UnsupportedModelError):
    with pytest.raises(error) as e:
        from_onnx(model)
    return str(e.value)


def test_bad_nodes_are_refused_by_name():
    x = _signal((2, 6), 2)
    assert "last axis" in _refusal(_dft_model(x, 20, -1, None), InvalidModelError)
    assert "dft_length 0" in _refusal(_dft_model(x, 20, 1, 0), InvalidModelError)
    empty = np.zeros((2, 0, 2), np.float32)
    assert "no samples along axis 1" in _refusal(_dft_model(empty, 20, 1, None), InvalidModelError)
    three = np.zeros((2, 6, 3), np.float32)
    assert "real part (1) or" in _refusal(_dft_model(three, 20, 1, None), InvalidModelError)
    # the length sets the output's shape: a graph input without an example is refused
    values = {"x": x, "n": np.array(4, np.int64)}
    message = _refusal(node_model("DFT", values, {"x", "n"}, 20))
    assert "dft_length" in message and "import time" in message
    big = np.zeros((1, 4096, 2), np.float32)
    assert "at most" in _refusal(_dft_model(big, 20, 1, None))
    signal = _signal((1, 10), 1)
    values = {"x": signal, "step": np.array(2, np.int64), "w": None,
              "n": np.array(12, np.int64)}  # fmt: skip
    assert "frame_length 12" in _refusal(node_model("STFT", values, {"x"}, 17), InvalidModelError)
    values = {"x": signal, "step": np.array(2, np.int64), "w": np.ones(4, np.float32)}
    assert "the window" in _refusal(node_model("STFT", values, {"x", "w"}, 17))
