"""A DenseNet dense block compiled at O1: every layer's feature map written into one buffer.

Each layer (scale and shift, relu, 3x3 conv, relu) reads the concatenation of the block's
input and every layer's output before it. The compiler lays those out one after another in
the buffer of the last concatenation (`mnrt.SlotView`s of the program), so no
concatenation runs a kernel. Prints the kernels the program runs, its slot views and the
modelled kernel time.

    python samples/dense_block.py [--layers 4] [--capture samples/dense_block.mnlb]

With --capture, the compiled run is recorded into a light binary with kernel fingerprints
(samples/dense_block.mnlb is such a capture, made by format 1.4, the first with slot
views): `mnrt run --locate samples/dense_block.mnlb` replays and checks every kernel.
"""

from __future__ import annotations

import argparse

import numpy as np

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.node_cost import graph_cost

GROWTH, CHANNELS, SIDE = 4, 8, 8


def dense_block(layers: int) -> GraphBuilder:
    rng = np.random.default_rng(0)
    b = GraphBuilder("dense_block")
    whole = b.input("x", (1, CHANNELS, SIDE, SIDE), "float")
    for i in range(layers):
        width = CHANNELS + i * GROWTH
        scale = b.param(f"scale{i}", rng.uniform(0.5, 1.5, (1, width, 1, 1)).astype(np.float32))
        shift = b.param(f"shift{i}", rng.uniform(-0.1, 0.1, (1, width, 1, 1)).astype(np.float32))
        h = b.relu(b.add(b.mul(whole, scale), shift))
        w = (rng.standard_normal((GROWTH, width, 3, 3)) / (3 * np.sqrt(width))).astype(np.float32)
        new = b.relu(b.conv2d(h, b.param(f"w{i}", w), padding=(1, 1, 1, 1)))
        whole = b.concat(whole, new, axis=1)
    b.output(b.global_avg_pool2d(whole), "y")
    return b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--capture", help="write the compiled run as a light binary")
    args = ap.parse_args()
    b = dense_block(args.layers)
    x = np.random.default_rng(1).standard_normal((1, CHANNELS, SIDE, SIDE)).astype(np.float32)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(b, {"x": x}, options={"option_json": "O1"})
        y = compiled({"x": x})["y"].cpu()
        program = compiled.lowered.program
        kernels = [k.op for k in program.kernels]
        print(f"{len(kernels)} kernels: {', '.join(kernels)}")
        for slot, view in program.views.items():
            print(f"  {slot}: elements {view.offset}... of {view.of}, shaped {view.shape}")
        print(f"modelled kernel time {graph_cost(compiled.graph).time_s * 1e6:.2f} us")
        print(f"y[0, :4] = {y.reshape(-1)[:4]}")
        if args.capture:
            compiled.save_binary(args.capture)
            print(f"captured to {args.capture}")


if __name__ == "__main__":
    main()
