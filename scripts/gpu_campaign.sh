#!/usr/bin/env bash
# One lease of a GPU machine: kernel rates (scripts/measure_gpu.py) and single-GPU training runs of
# examples/train_hf.py with telemetry, everything packed into $OUT/results.tar.gz (the device tool
# brings back at most 8 files). Run from the repository root:
#   bash scripts/gpu_campaign.sh runs      # all kernel families, then the training runs below
#   bash scripts/gpu_campaign.sh profile   # GEMMs again (CUDA graphs), profiler traces, torch.compile
#   bash scripts/gpu_campaign.sh waves     # GEMM time across wave boundaries; eager elementwise kernels
#   bash scripts/gpu_campaign.sh moe       # grouped GEMMs of MoE experts, router and permutation kernels
#   bash scripts/gpu_campaign.sh unfused   # the elementwise chains Megatron runs unfused for gpt-oss
#   bash scripts/gpu_campaign.sh decode    # serving: skinny GEMMs, decode attention, a whole decode step
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/results
mkdir -p "$R/runs"
nvidia-smi > "$R/nvidia-smi.txt" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" > "$R/versions.txt" 2>&1

train() {  # model seq micro-batch recompute [flags]: one run, its telemetry and log under runs/
  local model=$1 seq=$2 mb=$3 rc=$4
  shift 4
  local name="$model-s$seq-mb$mb-$rc$(echo "$*" | tr -d ' -' | sed 's/profiletrace.*/-trace/;s/^compile/-compile/')"
  local extra=("$@")
  [ "${extra[0]:-}" = "--profile-trace" ] && extra=(--profile-trace "$R/runs/$name.trace.json")
  timeout 300 python3 examples/train_hf.py "$model" --gpu h100-sxm --seq-len "$seq" --micro-batch "$mb" \
    --recompute "$rc" --steps "${STEPS:-20}" --checkpoint-dir "/tmp/ck-$name" --telemetry "$R/runs/$name.jsonl" \
    "${extra[@]}" > "$R/runs/$name.log" 2>&1
  echo "$name exit $? $(tail -1 "$R/runs/$name.jsonl" 2>/dev/null | cut -c1-120)"
  [ -f "$R/runs/$name.trace.json" ] && gzip -f "$R/runs/$name.trace.json"
}

case "${1:-runs}" in
runs)
  timeout 300 python3 scripts/measure_gpu.py --out "$R/kernels" 2>&1 | tail -20
  train llama-3.2-1b 2048 4 none
  train llama-3.2-1b 4096 2 none
  train llama-3.2-1b 4096 4 full
  train llama-3.2-1b 8192 1 none
  train llama-3.2-1b 16384 1 full
  train qwen3-0.6b 4096 4 none
  train qwen2.5-0.5b 2048 8 none
  train pythia-1.4b 2048 4 none
  ;;
profile)
  timeout 240 python3 scripts/measure_gpu.py --out "$R/kernels" --only gemm 2>&1 | tail -5
  STEPS=10 train llama-3.2-1b 4096 2 none --profile-trace
  STEPS=10 train llama-3.2-1b 4096 4 full --profile-trace
  STEPS=10 train qwen3-0.6b 4096 4 none --profile-trace
  STEPS=10 train qwen2.5-0.5b 2048 8 none --profile-trace
  STEPS=10 train pythia-1.4b 2048 4 none --profile-trace
  STEPS=30 train llama-3.2-1b 4096 2 none --compile
  STEPS=30 train qwen3-0.6b 4096 4 none --compile
  ;;
moe)
  timeout 420 python3 scripts/measure_moe_gpu.py --out "$R/kernels" 2>&1 | tail -400
  ;;
unfused)
  timeout 240 python3 scripts/measure_unfused_gpu.py --out "$R/kernels" 2>&1 | tail -20
  ;;
decode)
  timeout 420 python3 scripts/measure_decode_gpu.py --out "$R/kernels" 2>&1 | tail -40
  ;;
waves)
  timeout 300 python3 scripts/measure_gpu.py --out "$R/kernels" --only env,waves,eltwise 2>&1 | tail -5
  ;;
esac
tar -czf "${OUT:-/tmp/out}/results.tar.gz" -C "$(dirname "$R")" results && ls -la "${OUT:-/tmp/out}"
