#!/usr/bin/env bash
# Every GPU measurement of the project in one unattended command, on a CUDA machine with this package
# installed (bash run.sh test sets up .venv; on a GPU machine install a CUDA torch + cupy-cuda12x first).
#   bash benchmarks/gpu_suite.sh [OUT_DIR]       -> OUT_DIR/*.jsonl (default benchmarks/results)
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-results}
mkdir -p "$out"
PY=${PY:-python}
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
# biLM inference: fp32 and bf16 (eager and compiled cell), the paper's full configuration, big batches
$PY bilm_throughput.py --device cuda --configs full,small --batch-sizes 32,256,512 --precision fp32 --output "$out/bilm_throughput_gpu.jsonl"
$PY bilm_throughput.py --device cuda --configs full --batch-sizes 256,512,1024 --precision bf16 --output "$out/bilm_throughput_gpu.jsonl"
$PY bilm_throughput.py --device cuda --configs full --batch-sizes 256,512,1024 --precision bf16 --compile --output "$out/bilm_throughput_gpu.jsonl"
# accuracy of fp32/bf16 against the CPU, and the out-of-memory split
$PY gpu_checks.py --output "$out/gpu_checks.jsonl"
# end to end: nlp.pipe words/s with the elmo pipe, and pretraining tokens/s
$PY pipe_throughput.py --gpu --output "$out/pipe_throughput_gpu.jsonl" || echo "pipe_throughput failed"
$PY train_throughput.py --device cuda | tee -a "$out/train_throughput_gpu.jsonl" || echo "train_throughput (fp32) failed"
$PY train_throughput.py --device cuda --amp | tee -a "$out/train_throughput_gpu.jsonl" || echo "train_throughput (amp) failed"
echo "results in $out"
