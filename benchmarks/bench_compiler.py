"""The compiler: compiled models against onnxruntime on the CPU, and compile time per preset.

Figures (issue: compiler):
  replay time of a compiled CNN and transformer block vs onnxruntime on the same model
  (the model exported from mnrt's graph, run by onnxruntime's CPU provider): target <= 1.5x
  compile time per preset for the transformer block: reported

Two mnrt times are shown per model: a call of the compiled function (weights already on the
device: what a deployed model pays per inference), and a full replay of its light binary
(opening the device, uploading weights, running, reading, verifying goldens). A second table
compares cold starts, the whole cost of running a model file once: `mnrt.replay(path)`
(reading, validating and replaying the binary) against creating an onnxruntime session
from the ONNX file and running it once (reported, no target).

    pip install onnxruntime   # for this benchmark only
    python benchmarks/bench_compiler.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import Batch, best_time, best_times

import mnrt
from mnrt.compiler.models import MODELS
from mnrt.compiler.onnx_export import to_onnx

# The two models at their bundled sizes (which tests and the demo use), then at
# sizes where arithmetic rather than per-kernel overhead dominates: the CNN on a batch of 32
# and on one 224x224 image, the block at 256 and 512 tokens and at BERT-base's shape (128
# tokens of width 768, 12 heads, an MLP of 3072).
CASES = [
    ("cnn", "cnn", {}),
    ("transformer", "transformer", {}),
    ("cnn b32", "cnn", {"batch": 32}),
    ("cnn 224x224", "cnn", {"batch": 1, "size": 224}),
    ("transf 256x256", "transformer", {"seq": 256, "dim": 256}),
    ("transf 512x512", "transformer", {"seq": 512, "dim": 512}),
    ("bert-base block", "transformer", {"seq": 128, "dim": 768, "heads": 12}),
]

# Both sides optimise the graph (onnxruntime's default level fuses too) and compute in float32.
OPTIONS = {"option_json": "O3", "float_dtype": "float"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        raise SystemExit(
            "this benchmark compares with onnxruntime: pip install onnxruntime"
        ) from None

    print(
        f"compiled model ({OPTIONS}) vs onnxruntime {ort.__version__} (CPU), fastest of "
        f"3 alternating blocks of {args.repeat} (replay: of {args.repeat} loops)"
    )
    print(f"{'model':<15} {'ort ms':>8} {'call ms':>8} {'call/ort':>9} {'replay ms':>10} "
          f"{'replay/ort':>11}  target")  # fmt: skip
    cold = []
    with mnrt.Context() as ctx, tempfile.TemporaryDirectory() as tmp:
        for name, model, sizes in CASES:
            builder, inputs = MODELS[model](**sizes)
            graph = builder.build()
            onnx_bytes = to_onnx(graph).SerializeToString()
            session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
            compiled = ctx.compile(builder, inputs, options=OPTIONS)
            out = graph.outputs[0]

            def call(compiled=compiled, inputs=inputs, out=out):
                compiled(inputs)[out].cpu()

            path = Path(tmp) / f"{model}.mnlb"
            compiled.save_binary(path)
            binary = mnrt.LightBinary.load(path)

            def replay(repeat, binary=binary):
                return [mnrt.replay(binary, loops=repeat).timings["wall_min_s"]]

            t_ort, t_call, t_replay = best_times(
                lambda s=session, i=inputs: s.run(None, i), call, Batch(replay),
                repeat=args.repeat,
            )  # fmt: skip
            ok = "ok" if t_replay / t_ort <= 1.5 else "MISSED"
            print(
                f"{name:<15} {t_ort * 1e3:>8.2f} {t_call * 1e3:>8.2f} {t_call / t_ort:>9.2f} "
                f"{t_replay * 1e3:>10.2f} {t_replay / t_ort:>11.2f}  replay <= 1.5x {ok}"
            )

            def ort_cold(onnx_bytes=onnx_bytes, inputs=inputs):
                s = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
                s.run(None, inputs)

            cold.append((name, *best_times(ort_cold, lambda p=path: mnrt.replay(p), repeat=3)))

        print("\ncold start: run a model file once (fastest of 3 alternating blocks of 3)")
        print(f"{'model':<15} {'ort session+run ms':>19} {'mnrt.replay(path) ms':>21} {'ratio':>6}")
        for name, t_ort_cold, t_mnrt_cold in cold:
            print(
                f"{name:<15} {t_ort_cold * 1e3:>19.2f} {t_mnrt_cold * 1e3:>21.2f} "
                f"{t_mnrt_cold / t_ort_cold:>6.2f}"
            )

        print("\ncompile time per preset, transformer block (fastest of 3)")
        builder, inputs = MODELS["transformer"]()
        for preset in ("O0", "O1", "O2", "O3", "O4", "debug"):

            def compile_once(preset=preset):
                start = time.perf_counter()
                ctx.compile(builder, inputs, options={"option_json": preset})
                return time.perf_counter() - start

            t = best_time(compile_once, 3)
            print(f"  {preset:<6} {t * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
