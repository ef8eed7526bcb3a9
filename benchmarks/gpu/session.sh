#!/usr/bin/env bash
# One lent GPU's whole session, unattended and within a deadline, on the device machine: the GPU tests,
# the speed figures and a profile, a pretraining run, and the CPU test suite beside the pretraining.
#   bash benchmarks/gpu/session.sh OUT_DIR [SECONDS] [PRETRAIN_CORPUS.xz]
# SPEED_ONLY=1 skips the tests and the pretraining. The corpus: benchmarks/gpu/corpus.py, made beforehand.
# Needs .whl/site.tar.xz (bash benchmarks/gpu/wheels.sh) for spaCy, thinc and srsly, which that machine
# lacks. Every step has its own time limit, so a step that breaks or hangs costs only its share; each
# prints "=== NAME rc=N Ts" in OUT_DIR/session.log. Figures go to OUT_DIR/results.jsonl.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUT_DIR}
budget=${2:-560}
corpus=${3:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # the steps below run in benchmarks/
exec > >(tee -a "$out/session.log") 2>&1
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
step() {  # step NAME LIMIT_SECONDS COMMAND...: never past the deadline
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  if [ "$limit" -lt 5 ]; then echo "=== $name skipped: out of time"; return 0; fi
  echo "=== $name (limit ${limit}s, $(left)s left)"
  timeout -s TERM -k 15 "$limit" "$@"
  rc=$?
  echo "=== $name rc=$rc $((SECONDS - t0))s"
}
results=$out/results.jsonl
PY=python3

mkdir -p /tmp/site
tar -xJf .whl/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
$PY -c "import torch, cupy, spacy, thinc, spacy_elmo; print('torch', torch.__version__, torch.version.cuda, \
torch.cuda.get_device_name(), 'cupy', cupy.__version__, 'spacy', spacy.__version__, 'thinc', thinc.__version__)"
nproc; free -g | head -2

if [ -n "$corpus" ]; then  # tokenized on the CPU while the GPU tests run (the pretraining's cache entry)
  mkdir -p /tmp/corpus
  (xz -dc "$corpus" > /tmp/corpus/train.txt && $PY -c "from spacy_elmo.pretrain.corpus import prepare_corpus, \
CorpusSettings; s = prepare_corpus('/tmp/corpus/train.txt', CorpusSettings(format='bilm-tf'), '/tmp/ccache'); \
print('corpus cached', len(s))") > "$out/corpus.log" 2>&1 &
  corpus_pid=$!
fi

if [ "${SPEED_ONLY:-0}" = 1 ]; then corpus=""; fi
# 1. correctness: the GPU tests (fp32/bf16/fp16 pipe vs CPU, to_cpu, spacy train --gpu-id 0, OOM split, the GPU's
#    LSTM loop and its CUDA graphs against the CPU)
[ "${SPEED_ONLY:-0}" = 1 ] || step gpu-tests 200 $PY -m pytest -p no:cacheprovider -q -rA -m gpu tests/pipeline/test_gpu.py \
  tests/bilm/test_runner.py tests/bilm/test_gpu_bilm.py

# 2. speed: the full configuration at big batches (CUDA graphs on, then off; bf16 with the compiled cell), where a
#    forward's time goes, end to end (with a profile of the pipe's Python side), training
cd benchmarks
step bilm 80 $PY bilm_throughput.py --device cuda --configs full,small --batch-sizes 256,1024,4096 \
  --precision fp32,bf16 --min-seconds 1 --output "$results"
step bilm-eager 40 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024 --precision fp32,bf16 \
  --no-cuda-graphs --min-seconds 1 --output "$results"
step bilm-compiled 80 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024,4096 --precision bf16 \
  --compile --min-seconds 1 --output "$results"
step profile 40 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024 --precision bf16 \
  --min-seconds 0 --profile
step pipe 60 $PY pipe_throughput.py --gpu --models shipped,full --words 100000 --repeats 2 --output "$results"
step pipe-budget 60 $PY pipe_throughput.py --gpu --models shipped,full --words 100000 --repeats 2 --precision fp32,bf16 \
  --token-budget 32768 --batch-size 512 --output "$results"
for run in "32 fp32" "256 --amp" "512 --amp"; do
  set -- $run
  step "train-full-$1-$2" 40 bash -c "$PY train_throughput.py --device cuda --configs full --batch-size $1 \
    --steps 8 --warmup 3 ${2#fp32} | tee -a $results"
done
small="$(cat ../spacy_elmo/models/en_elmo_small/options.json)"  # the shipped model's shape, as pretrained below
for amp in "" --amp; do  # (only where a pretraining follows: it sizes the run)
  [ -n "$corpus" ] && step "train-small$amp" 40 bash -c "$PY train_throughput.py --device cuda --options-json '$small' --vocab 30000 \
    --batch-size ${PRETRAIN_BATCH:-512} --window 32 --negatives 4096 --steps 20 --warmup 5 $amp | tee -a $results \
    > /tmp/train_small$amp.json"
done
cd ..

# 3. pretraining on the given corpus for the time left (SIGTERM at the limit saves the model), and the
#    CPU test suite beside it (GPU visible; the slow set is left to CI)
if [ -n "$corpus" ]; then
  wait "$corpus_pid"  # (a bare wait would also wait for the tee above)
  cat "$out/corpus.log"
  step_s=$(left)
  minutes=$(python3 -c "print(round(max(0.5, ($step_s - 60) / 60), 2))")
  # amp only where it pays 1.3x; the cosine schedule ends where the measured rate says the time runs out
  read -r amp steps < <(python3 - "$minutes" "${PRETRAIN_BATCH:-512}" <<'PYEOF'
import json, sys
def rate(path):
    try:
        return float(json.loads(open(path).read().strip().splitlines()[-1])["tokens_per_s"])
    except Exception:
        return 0.0
fp32, amp = rate("/tmp/train_small.json"), rate("/tmp/train_small--amp.json")
best, use_amp = (amp, "fp16") if amp > 1.3 * fp32 else (fp32, "fp32")
seconds = float(sys.argv[1]) * 60 - 45
print(use_amp, max(500, int(best * seconds / (int(sys.argv[2]) * 32))) if best else 4000)
PYEOF
)
  echo "pretraining: precision $amp, $steps steps, at most $minutes minutes"
  (timeout -s TERM -k 20 $((step_s - 20)) $PY -m pytest -p no:cacheprovider -q -n 6 -m "not slow and not gpu" tests \
    > "$out/cpu_tests.log" 2>&1; echo "cpu tests rc=$?" >> "$out/cpu_tests.log") &
  tests_pid=$!
  step pretrain $((step_s - 25)) $PY -m spacy_elmo pretrain spacy_elmo/configs/pretrain_en_small.cfg /tmp/pretrain \
    --paths.train /tmp/corpus/train.txt --paths.dev .whl/dev.txt --corpus.format bilm-tf \
    --corpus.cache_dir /tmp/ccache --training.device cuda --training.batch_size "${PRETRAIN_BATCH:-512}" \
    --training.n_negatives 4096 --training.optimizer.learn_rate "${PRETRAIN_LR:-0.003}" \
    --training.schedule.warmup_steps 300 --training.schedule.decay cosine \
    --training.schedule.final_learn_rate_ratio 0.05 --training.max_steps "$steps" --training.precision "$amp" \
    --training.max_minutes "$minutes" --training.eval_every 500 --training.checkpoint_every 1000 \
    --training.log_every 100
  wait "$tests_pid"
  tail -5 "$out/cpu_tests.log"
  cp /tmp/pretrain/metrics.jsonl "$out/pretrain_metrics.jsonl" 2>/dev/null
  if [ -f /tmp/pretrain/model/model.msgpack ]; then
    tar -cf - -C /tmp/pretrain model config.cfg | split -b 15M - "$out/pretrained.tar.part-"
  fi
fi
echo "=== session done in $((SECONDS - start))s"
