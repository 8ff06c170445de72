#!/usr/bin/env python3
"""Reference E4M3 weight quantization computed by compressed-tensors itself, for
tests/kernels/test_w8a8_golden.cpp.

For FP32, BF16 and FP16 weights and both strategies (channel, tensor), it runs the code path
llm-compressor's memoryless min-max observer takes: min/max over the row (channel) or the whole
tensor, compressed_tensors.quantization.utils.calculate_qparams, then
compressed_tensors.quantization.lifecycle.forward.quantize(..., dtype=float8_e4m3fn), on the CPU.

Needs torch and compressed-tensors (llmcompressor 0.14.0.1 pins compressed-tensors==0.19.0):
    python -m venv /tmp/venv-ct && /tmp/venv-ct/bin/pip install torch compressed-tensors==0.19.0
    /tmp/venv-ct/bin/python scripts/make_w8a8_reference.py tests/kernels/golden/w8a8_weight_quant.json
(or any Python with torch where `pip install --no-deps --target DIR compressed-tensors==0.19.0
loguru` is put on PYTHONPATH).
"""
import json
import sys

import torch
import compressed_tensors
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import quantize
from compressed_tensors.quantization.utils import calculate_qparams


def weights(dtype):
    g = torch.Generator().manual_seed(1234)
    rows, cols = 12, 40
    w = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    mags = [1e-3, 0.02, 0.05, 1.0, 3.0, 300.0, 1e-6, 1e-9, 0.02, 0.02, 1.0, 1.0]
    for r, m in enumerate(mags):
        w[r] *= m
    w[8] = 0.0                                  # all-zero row: scale == 0 -> eps of the dtype
    w[9] = -w[9].abs()                          # negative-only row: |min| sets the scale
    # amax 448 -> scale 1: exact ties between E4M3 codes (round half to even), saturation edge
    w[10, :8] = torch.tensor([448.0, 1.0625, 1.1875, 17.0, 19.0, -0.0029296875, 0.0009765625, -448.0])
    w[11, :4] = torch.tensor([1e-30, -1e-30, 7.0, -7.0])
    return w.to(dtype)


def main(out_path):
    cases = []
    for dtype_name, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16),
                              ("float16", torch.float16)]:
        w = weights(dtype)
        for strategy in ["channel", "tensor"]:
            args = QuantizationArgs(num_bits=8, type="float", strategy=strategy, symmetric=True,
                                    dynamic=False)
            if strategy == "channel":
                mn = torch.amin(w, dim=1, keepdim=True)
                mx = torch.amax(w, dim=1, keepdim=True)
            else:
                mn, mx = torch.aminmax(w)
            scale, zp = calculate_qparams(mn, mx, args)
            assert scale.dtype == dtype, scale.dtype
            q = quantize(x=w, scale=scale, zero_point=zp, args=args, dtype=torch.float8_e4m3fn)
            codes = q.view(torch.uint8).flatten().tolist()
            # How many codes FP32 arithmetic (no rounding of w / s to the dtype) would change:
            # shows the test can tell the two rules apart.
            q32 = torch.clamp(w.float() / scale.float(), -448, 448).to(torch.float8_e4m3fn)
            differ = int((q32.view(torch.uint8).flatten() != q.view(torch.uint8).flatten()).sum())
            print(f"{dtype_name} {strategy}: fp32-arithmetic codes differing: {differ}")
            cases.append({
                "dtype": dtype_name,
                "strategy": strategy,
                "rows": w.shape[0],
                "cols": w.shape[1],
                "weight": [float(v) for v in w.float().flatten().tolist()],
                "scale": [float(v) for v in scale.float().flatten().tolist()],
                "codes": codes,
            })
    doc = {
        "generator": "scripts/make_w8a8_reference.py",
        "compressed_tensors_version": compressed_tensors.__version__,
        "torch_version": torch.__version__,
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
