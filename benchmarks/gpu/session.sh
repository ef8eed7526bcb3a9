#!/usr/bin/env bash
# One lent GPU's whole session, unattended and within a deadline, on the device machine: the GPU tests,
# the speed figures and a profile, a pretraining run with the CPU test suite beside it, and the new model's
# held-out perplexity beside the shipped one's.
#   bash benchmarks/gpu/session.sh OUT_DIR [SECONDS] [PRETRAIN_CORPUS.xz]
# Without a corpus, no pretraining. FIGURES=0 skips the speed figures: then the GPU tests run beside the
# pretraining, which gets the time. TESTS=0 skips the GPU and CPU tests. The corpus and held-out texts:
# benchmarks/gpu/corpus.py, made beforehand. The pretraining: PRETRAIN_CONFIG (default the shipped model's),
# PRETRAIN_ARGS (config overrides, e.g. "--model.lstm_dim 1024 --vocab.file .whl/vocab.txt"), INIT_FROM (a
# model directory to go on from, e.g. spacy_elmo/models/en_elmo_small); PRETRAIN_BATCH, PRETRAIN_LR and
# PRETRAIN_WARMUP the batch, peak learning rate and warm-up. Its held-out perplexities go to
# OUT_DIR/perplexity.jsonl, the model as it would ship to OUT_DIR/pretrained.tar.part-*. A dry run of the
# pretraining path on the CPU before GPU time is spent on it: DEVICE=cpu FIGURES=0 TESTS=0 PRETRAIN_BATCH=16.
# Needs .whl/site.tar.xz (bash benchmarks/gpu/wheels.sh) where spaCy, thinc and srsly are missing, as on
# that machine. Every step has its own time limit, so a step that breaks or hangs costs only its share; each
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

dev=${DEVICE:-cuda}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ! $PY -c "import spacy, thinc, srsly" 2>/dev/null; then
  mkdir -p /tmp/site
  tar -xJf .whl/site.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site:$PWD
fi
if [ "$dev" = cpu ]; then
  $PY -c "import torch, spacy, thinc; print('torch', torch.__version__, 'spacy', spacy.__version__, 'thinc', thinc.__version__)"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch, cupy, spacy, thinc, spacy_elmo; print('torch', torch.__version__, torch.version.cuda, \
torch.cuda.get_device_name(), 'cupy', cupy.__version__, 'spacy', spacy.__version__, 'thinc', thinc.__version__)"
fi
nproc; free -g | head -2

# the pretraining's settings, checked before any GPU time is spent: the model's options for the rate probes
pretrain_config=${PRETRAIN_CONFIG:-spacy_elmo/configs/pretrain_en_small.cfg}
read -r -a extra_args <<< "${PRETRAIN_ARGS:-}"
pretrain_args=(--paths.train /tmp/corpus/train.txt --paths.dev .whl/dev.txt --corpus.format bilm-tf
  --corpus.cache_dir /tmp/ccache --training.device "$dev" --training.batch_size "${PRETRAIN_BATCH:-512}"
  --training.n_negatives 4096 --training.optimizer.learn_rate "${PRETRAIN_LR:-0.003}"
  --training.schedule.warmup_steps "${PRETRAIN_WARMUP:-300}" --training.schedule.decay cosine
  --training.schedule.final_learn_rate_ratio 0.05 --training.eval_every 500 --training.checkpoint_every 1000
  --training.log_every 100 "${extra_args[@]}")
init_args=()
[ -n "${INIT_FROM:-}" ] && init_args=(--init-from "$INIT_FROM")
if [ -n "$corpus" ]; then
  options=$($PY - "$pretrain_config" "${INIT_FROM:-}" "${pretrain_args[@]}" <<'PYEOF'
import json, sys
from spacy.cli._util import parse_config_overrides
from spacy_elmo import BiLMOptions, load_model
from spacy_elmo.pretrain import load_config
from spacy_elmo.pretrain.config import PretrainSettings
from spacy_elmo.pretrain.vocab import Vocab
path, init_from, overrides = sys.argv[1], sys.argv[2], parse_config_overrides(sys.argv[3:])
settings = PretrainSettings.from_config(load_config(path, overrides), source=path)
if init_from:
    options = load_model(init_from).bilm.options
else:
    size = len(Vocab.from_file(settings.vocab.file)) if settings.vocab.file else settings.vocab.max_size or 30000
    options = BiLMOptions(**settings.model, n_tokens_vocab=size)
print(json.dumps(options.to_dict()))
PYEOF
  ) || { echo "=== the pretraining settings do not load: no pretraining"; corpus=""; }
  vocab_size=$($PY -c "import json, sys; print(json.loads(sys.argv[1])['n_tokens_vocab'])" "$options" 2>/dev/null)
fi

if [ -n "$corpus" ]; then  # tokenized on the CPU while the GPU tests run (the pretraining's cache entry)
  mkdir -p /tmp/corpus
  (xz -dc "$corpus" > /tmp/corpus/train.txt && $PY -c "from spacy_elmo.pretrain.corpus import prepare_corpus, \
CorpusSettings; s = prepare_corpus('/tmp/corpus/train.txt', CorpusSettings(format='bilm-tf'), '/tmp/ccache'); \
print('corpus cached', len(s.tokens), 'tokens')") > /tmp/corpus.log 2>&1 &
  corpus_pid=$!
fi

figures=${FIGURES:-1} tests=${TESTS:-1}
# 1. correctness: the GPU tests (fp32/bf16/fp16 pipe vs CPU, to_cpu, spacy train --gpu-id 0, OOM split, the GPU's
#    LSTM loop and its CUDA graphs against the CPU): first, before any figure; beside the pretraining without them
gpu_tests=($PY -m pytest -p no:cacheprovider -q -rA -m gpu tests/pipeline/test_gpu.py tests/bilm/test_runner.py
  tests/bilm/test_gpu_bilm.py)
[ "$tests" = 1 ] && [ "$figures" = 1 ] && step gpu-tests 200 "${gpu_tests[@]}"

# 2. speed: the full configuration at big batches (CUDA graphs on, then off; bf16 with the compiled cell), where a
#    forward's time goes, end to end (with a profile of the pipe's Python side), training
cd benchmarks
if [ "$figures" = 1 ]; then
  step bilm 80 $PY bilm_throughput.py --device cuda --configs full,small --batch-sizes 256,1024,4096 \
    --precision fp32,bf16 --min-seconds 1 --output "$results"
  step bilm-eager 40 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024 --precision fp32,bf16 \
    --no-cuda-graphs --min-seconds 1 --output "$results"
  step bilm-compiled 80 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024,4096 --precision bf16 \
    --compile --min-seconds 1 --output "$results"
  step profile 40 $PY bilm_throughput.py --device cuda --configs full --batch-sizes 1024 --precision bf16 \
    --min-seconds 0 --profile
  step pipe 60 $PY pipe_throughput.py --gpu --models shipped,full --words 100000 --repeats 2 --output "$results"
  step pipe-budget 60 $PY pipe_throughput.py --gpu --models shipped,full --words 100000 --repeats 2 \
    --precision fp32,bf16 --token-budget 32768 --batch-size 512 --output "$results"
  for run in "32 fp32" "256 --amp" "512 --amp"; do
    set -- $run
    step "train-full-$1-$2" 40 bash -c "$PY train_throughput.py --device cuda --configs full --batch-size $1 \
      --steps 8 --warmup 3 ${2#fp32} | tee -a $results"
  done
fi
for amp in "" --amp; do  # the rate of the model to pretrain, in each precision (only where a pretraining follows: it
  # sizes the run)
  [ -n "$corpus" ] && step "train-probe$amp" 40 bash -c "$PY train_throughput.py --device $dev --options-json '$options' \
    --vocab $vocab_size --batch-size ${PRETRAIN_BATCH:-512} --window 32 --negatives 4096 --steps ${PROBE_STEPS:-20} --warmup 5 \
    $amp | tee -a $results > /tmp/train_probe$amp.json"
done
cd ..

# 3. pretraining on the given corpus for the time left (SIGTERM at the limit saves the model), and the
#    CPU test suite beside it (GPU visible; the slow set is left to CI)
if [ -n "$corpus" ]; then
  wait "$corpus_pid"  # (a bare wait would also wait for the tee above)
  cat /tmp/corpus.log
  step_s=$(left)
  held_out_s=${EVAL_SECONDS:-90}  # kept for the held-out perplexities and the model's archive
  minutes=$(python3 -c "print(round(max(0.5, ($step_s - $held_out_s - 40) / 60), 2))")
  # amp only where it pays 1.3x; the cosine schedule ends where the measured rate says the time runs out
  share=1.0  # of the probes' rate the pretraining gets: less while the GPU tests run beside it
  [ "$tests" = 1 ] && [ "$figures" = 0 ] && [ "$dev" != cpu ] && share=0.9
  read -r amp steps < <(python3 - "$minutes" "${PRETRAIN_BATCH:-512}" "$share" <<'PYEOF'
import json, sys
def rate(path):
    try:
        return float(json.loads(open(path).read().strip().splitlines()[-1])["tokens_per_s"])
    except Exception:
        return 0.0
fp32, amp = rate("/tmp/train_probe.json"), rate("/tmp/train_probe--amp.json")
best, use_amp = (amp, "fp16") if amp > 1.3 * fp32 else (fp32, "fp32")
seconds = float(sys.argv[1]) * 60 - 45
print(use_amp, max(500, int(best * float(sys.argv[3]) * seconds / (int(sys.argv[2]) * 32))) if best else 4000)
PYEOF
)
  [ "$dev" = cpu ] && [ "$amp" = fp16 ] && amp=bf16  # (the CPU's 16-bit autocast)
  echo "pretraining: precision $amp, $steps steps, at most $minutes minutes"
  tests_pids=()
  if [ "$tests" = 1 ]; then  # the CPU test suite beside the pretraining (GPU visible; the slow set is left to CI),
    # and the GPU tests where they did not run first
    (timeout -s TERM -k 20 $((step_s - 20)) $PY -m pytest -p no:cacheprovider -q -n 6 -m "not slow and not gpu" tests \
      > "$out/cpu_tests.log" 2>&1; echo "cpu tests rc=$?" >> "$out/cpu_tests.log") &
    tests_pids+=($!)
    if [ "$figures" = 0 ]; then
      (timeout -s TERM -k 15 200 "${gpu_tests[@]}" > "$out/gpu_tests.log" 2>&1; echo "gpu tests rc=$?" >> "$out/gpu_tests.log") &
      tests_pids+=($!)
    fi
  fi
  step pretrain $((step_s - held_out_s)) $PY -m spacy_elmo pretrain "$pretrain_config" /tmp/pretrain \
    "${init_args[@]}" --training.max_steps "$steps" --training.precision "$amp" --training.max_minutes "$minutes" \
    "${pretrain_args[@]}"
  if [ ${#tests_pids[@]} -gt 0 ]; then
    wait "${tests_pids[@]}"
    tail -5 "$out/cpu_tests.log"
    tail -3 "$out/gpu_tests.log" 2>/dev/null
  fi
  cp /tmp/pretrain/metrics.jsonl "$out/pretrain_metrics.jsonl" 2>/dev/null
  if [ -f /tmp/pretrain/model/model.msgpack ]; then
    # as it would ship (a float16 softmax, as en_elmo_small's), which is what is measured and brought back
    $PY -c "from spacy_elmo import load_model; from spacy_elmo.io.native import save_native; \
save_native(load_model('/tmp/pretrain/model').bilm, '/tmp/ship/model', softmax_dtype='float16')"
    cp /tmp/pretrain/config.cfg /tmp/ship/
    # the card's held-out perplexities (full softmax, the first 30,000 words), the new model's beside the shipped
    # one's: comparable only where both have the same vocabulary (an INIT_FROM model's, or --vocab.file)
    rm -rf /tmp/ppl && mkdir -p /tmp/ppl
    for model in new:/tmp/ship/model shipped:spacy_elmo/models/en_elmo_small; do
      for text in "gutenberg_test.txt.gz text" "wikitext_valid.tokens tokenized"; do
        set -- $text
        step "perplexity-${model%%:*}-${1%%.*}" "$held_out_s" $PY -m spacy_elmo evaluate "${model#*:}" ".whl/$1" \
          --format "$2" --max-tokens 30000 --device "$dev" --output "/tmp/ppl/${model%%:*}-${1%%.*}.json"
      done
    done
    $PY -c "import json, pathlib, sys; sys.stdout.writelines(json.dumps({'run': p.stem, **json.loads(p.read_text())}) \
+ '\n' for p in sorted(pathlib.Path('/tmp/ppl').glob('*.json')))" > "$out/perplexity.jsonl"
    tar -cf - -C /tmp/ship model config.cfg | split -b 15M - "$out/pretrained.tar.part-"
  fi
fi
# at most 8 files come back: past that, the records but session.log travel as one archive
if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
  (cd "$out" && tar -czf records.tar.gz --exclude session.log --exclude 'pretrained.tar.part-*' --remove-files *.log *.jsonl)
fi
echo "=== session done in $((SECONDS - start))s"
