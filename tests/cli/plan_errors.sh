# `dtrain plan` and `dtrain scenario` on bad input: each case exits non-zero with an error that
# names the field (the issue's list: unknown preset, a layout whose product does not match the
# GPU count, tp not dividing the heads, a micro-batch not dividing the batch, zero or negative
# sizes), and a layout that does not fit is not an error.
source "$(dirname "$0")/lib/expect.bash"

c=(--cluster 8x8xH100)
expect_error "--model: unknown preset 'llama3-405b'" plan --model llama3-405b "${c[@]}"
expect_error "--cluster '8x8xB300': unknown node type 'B300'" plan --model llama2-70b --cluster 8x8xB300
expect_error "--cluster is required" plan --model llama2-70b
expect_error "--dp 2 x --tp 8 x --pp 8 = 128 GPUs does not match the cluster's 64 \(8 nodes x 8\)" \
  plan --model llama2-70b "${c[@]}" --dp 2 --tp 8 --pp 8
expect_error "--tp 3 x --pp 1 does not divide the cluster's 64 GPUs" plan --model llama2-70b "${c[@]}" --tp 3
expect_error "--tp 3 does not divide --heads 64" plan --model llama2-70b --cluster 6x8xH100 --tp 3
expect_error "--micro-batch 3 x --dp 8 = 24 does not divide --global-batch 1024" \
  plan --model llama2-70b "${c[@]}" --tp 8 --micro-batch 3
expect_error "--pp 3 x --vp 2 = 6 does not divide --layers 80" plan --model llama2-70b --cluster 6x8xH100 --tp 8 --pp 3 --vp 2
expect_error "--micro-batch: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --micro-batch 0
expect_error "--micro-batch: must be at least 1 \(got -2\)" plan --model llama2-70b "${c[@]}" --micro-batch -2
expect_error "--tp: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --dp 64 --tp 0
expect_error "--zero: must be at most 3 \(got 5\)" plan --model llama2-70b "${c[@]}" --zero 5
expect_error "--global-batch: must be at least 1 \(got -8\)" plan --model llama2-70b "${c[@]}" --global-batch -8
expect_error "--global-batch: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --global-batch 0
expect_error "--layers: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --layers 0
expect_error "--hidden: must be at least 1 \(got -4096\)" plan --model llama2-70b "${c[@]}" --hidden -4096
expect_error "--seq-length: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --seq-length 0
expect_error "--params: must be at least 1 \(got -7e9\)" plan --model llama2-70b "${c[@]}" --params -7e9
expect_error "--tokens: must be at least 0 \(got -1\)" plan --model llama2-70b "${c[@]}" --tokens -1
expect_error "--cluster '0x8xH100' is not NODESxGPUSxTYPE" plan --model llama2-70b --cluster 0x8xH100
expect_error "--nodes: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --nodes 0
expect_error "--gpu-memory: 'lots' is not a size" plan --model llama2-70b "${c[@]}" --gpu-memory lots
# A bare number would be bytes (the GPU of 80 bytes on which nothing fits): refused with the fix.
expect_error "--gpu-memory: '80' has no unit; write 80GB \(10\^9 bytes\) or 80GiB" \
  plan --model llama2-70b "${c[@]}" --gpu-memory 80
expect_error "--gpu-memory: 80B is not a GPU's memory" plan --model llama2-70b "${c[@]}" --gpu-memory 80B
expect_error "--peak-tflops: must be a finite number" plan --model llama2-70b "${c[@]}" --peak-tflops inf
# --top and the layout flags that --search cannot hold.
expect_error "--top sets how many layouts --search prints: add --search" plan --model llama2-70b "${c[@]}" --top 3
expect_error "--schedule fixes one layout's schedule; --search ranks 1F1B" \
  plan --model llama2-70b "${c[@]}" --search --schedule gpipe
expect_error "--rank-order fixes one layout's rank order" plan --model llama2-70b "${c[@]}" --search --rank-order dp-tp-pp
expect_error "--search: no valid layout has tp=3 on 64 GPUs" plan --model llama2-70b "${c[@]}" --search --tp 3
expect_error "--largest-model answers for every model and ZeRO stage: --hidden does not apply" \
  plan "${c[@]}" --largest-model --hidden 4096
expect_error "--largest-model with a model searches its width: --params does not apply" \
  plan --model llama2-70b "${c[@]}" --largest-model --params 7e9
expect_error "--offload-convention applies to --offload's table: add --offload" \
  plan --model llama2-70b "${c[@]}" --offload-convention zero-offload
expect_error "--offload-convention must be deepspeed, deepspeed-zero2-code or zero-offload, got 'paper'" \
  plan --model llama2-70b "${c[@]}" --offload --offload-convention paper
expect_error "--selective-flops must be eq8 or rerun, got 'eq7'" \
  plan --model llama2-70b "${c[@]}" --recompute selective --selective-flops eq7
expect_error "--offload needs a model: --model PRESET \(or a shape\), or --params N with --largest-layer M" \
  plan "${c[@]}" --offload --params 7e9
expect_error "--largest-layer must be in \[1, 1000\]" plan "${c[@]}" --offload --params 1000 --largest-layer 5000
# Measured rates: one of them, for one layout, not above the peak.
expect_error "--step-time excludes --achieved-tflops|--achieved-tflops excludes --step-time" \
  plan --model llama2-70b "${c[@]}" --tp 8 --achieved-tflops 300 --step-time 10
expect_error "--achieved-tflops and --step-time describe one measured layout" \
  plan --model llama2-70b "${c[@]}" --search --achieved-tflops 300
expect_error "--achieved-tflops 2000 exceeds the GPU's peak of 989" plan --model llama2-70b "${c[@]}" \
  --tp 8 --achieved-tflops 2000
expect_error "--achieved-tflops: must be a finite number" plan --model llama2-70b "${c[@]}" --achieved-tflops nan
# A cluster file's figure in the wrong unit names the field and its unit.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$DTRAIN" plan --cluster 1x8xA100 --print-cluster | sed 's/"peak_flops": [0-9.e+]*/"peak_flops": 312/' >"$tmp/c.json"
expect_error "field 'gpu.peak_flops' is 312 FLOP/s, outside .* 312 TFLOP/s is 3.12e14" \
  plan --model llama2-70b --cluster "$tmp/c.json"
expect_error "--compute-efficiency: must be at most 1 \(got 2\)" plan --model llama2-70b "${c[@]}" --compute-efficiency 2
expect_error "--precision must be one of" plan --model llama2-70b "${c[@]}" --precision fp8
expect_error "--recompute must be none, selective or full" plan --model llama2-70b "${c[@]}" --recompute some
expect_error "--rank-order must list tp, dp and pp" plan --model llama2-70b "${c[@]}" --rank-order tp-pp
expect_error "--microbatches 7 does not divide --global-batch 1024 / --dp 8" \
  plan --model llama2-70b "${c[@]}" --tp 8 --microbatches 7
expect_error "--vp 2 needs --pp > 1" plan --model llama2-70b "${c[@]}" --tp 8 --vp 2
expect_error "give --model PRESET, or a custom shape" plan "${c[@]}" --layers 4
expect_error "--global-batch is required" plan "${c[@]}" --layers 4 --hidden 256 --heads 4 --vocab 1000 --seq-length 128
expect_error "--heads 5 does not divide --hidden 256" \
  plan "${c[@]}" --layers 4 --hidden 256 --heads 5 --vocab 1000 --seq-length 128 --global-batch 64

# Cluster files: errors name the file and the field.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_error "--cluster $tmp/none.json: no such file" plan --model llama2-70b --cluster "$tmp/none.json"
mkdir "$tmp/dir.json"
expect_error "--cluster $tmp/dir.json: is a directory" plan --model llama2-70b --cluster "$tmp/dir.json"
expect_error "--cluster is empty" plan --model llama2-70b --cluster ""
expect_error "--cluster $tmp/dir.json: is a directory" bench plan --repeats 1 --cluster "$tmp/dir.json"
echo '{"nodes": 2, "gpus_per_node": 8}' >"$tmp/partial.json"
expect_error "cluster file '$tmp/partial.json': missing object 'gpu'" plan --model llama2-70b --cluster "$tmp/partial.json"
echo '{"preset": "H100", "nodes": 2, "gpu": {"memory_bytes": -1}}' >"$tmp/negative.json"
expect_error "field 'gpu.memory_bytes' must be positive" plan --model llama2-70b --cluster "$tmp/negative.json"
echo '{ nodes: 2' >"$tmp/broken.json"
expect_error "cluster file '$tmp/broken.json' is not valid JSON" plan --model llama2-70b --cluster "$tmp/broken.json"

expect_error "scenario: unknown scenario 'size-1t'" scenario size-1t
expect_error "scenario: unknown scenario ''" scenario ""

# Numbers out of range are refused with the bound in plain digits (never CLI11's 300-digit
# limit), whatever the class: zero, negative, not finite, not whole, past the bound.
expect_error "--kv-heads: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --kv-heads 0
expect_error "--ffn-hidden: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --ffn-hidden 0
expect_error "--params: must be a finite number \(got inf\)" plan --model llama2-70b "${c[@]}" --params inf
expect_error "--tokens: must be a finite number \(got nan\)" plan --model llama2-70b "${c[@]}" --tokens nan
expect_error "--peak-tflops: must be a finite number \(got inf\)" plan --model llama2-70b "${c[@]}" --peak-tflops inf
expect_error "--peak-tflops: must be at most 1e\+06 \(got 1e300\)" plan --model llama2-70b "${c[@]}" --peak-tflops 1e300
expect_error "--intra-bandwidth: must be at least" plan --model llama2-70b "${c[@]}" --intra-bandwidth 0
expect_error "--inter-latency-us: must be a finite number \(got inf\)" plan --model llama2-70b "${c[@]}" --inter-latency-us inf
expect_error "--dp: must be at most 1000000 \(got 99999999999999999999\)" plan --model llama2-70b "${c[@]}" --dp 99999999999999999999
expect_error "--micro-batch: must be at most 1000000000 \(got 9000000000000000000\)" \
  plan --model llama2-70b "${c[@]}" --micro-batch 9000000000000000000
expect_error "--micro-batch 2048 is larger than --global-batch 1024" plan --model llama2-70b "${c[@]}" --micro-batch 2048
expect_error "--nodes: must be a whole number \(got 1e30\)" plan --model llama2-70b "${c[@]}" --nodes 1e30
expect_error "--activation-bytes: must be at most 8" plan --model llama2-70b "${c[@]}" --activation-bytes 9000000000000000000
expect_error "--vocab: must be at most 100000000" plan --model llama2-70b "${c[@]}" --vocab 9000000000000000000
expect_error "--top: must be at least 1 \(got 0\)" plan --model llama2-70b "${c[@]}" --search --top 0
expect_error "--repeats: must be at least 1 \(got 0\)" bench plan --repeats 0
expect_error "--model: unknown preset ''" plan --model "" "${c[@]}"
expect_error "9999999 x --gpus-per-node 9999999 = 99999980000001 GPUs; at most 1000000" \
  plan --model llama2-70b --cluster 9999999x9999999xH100
expect_error "the model has .* parameters .*; at most 1e\+17 are supported" \
  plan "${c[@]}" --layers 100000 --hidden 1000000 --heads 1000 --vocab 1000 --seq-length 128 --global-batch 64
# A search that would take minutes is refused before it starts, with its size.
expect_error "--search would evaluate [0-9]+ layouts .* about [0-9]+ s; at most 30 s" \
  plan --cluster 1000x1000xH100 --layers 10000 --hidden 100000 --heads 1000 --vocab 1000 \
  --seq-length 128 --global-batch 1000000000 --search

# A measured rate that cannot be: a step faster than the GPUs' peak, a layout that does not fit,
# and --largest-layer (an --offload input) given without --offload.
gpt3=(--model gpt3-175b --cluster 128x8xA100 --tp 8 --pp 16 --recompute full)
expect_error "--step-time 1.0 us is shorter than this layout's step can be: .* TFLOP/s per GPU, above the GPU's peak of 312.0 TFLOP/s" \
  plan "${gpt3[@]}" --step-time 1e-6
expect_error "--step-time describes a measured run of this layout, but the layout does not fit: a GPU needs" \
  plan --model llama2-70b "${c[@]}" --step-time 1000
# The issue's case: a non-fitting layout at 10 s would run at 294% of the peak.
expect_error "--step-time 10.00 s is shorter than this layout's step can be: .* 2913.0 TFLOP/s per GPU, above the GPU's peak of 989.0" \
  plan --model llama2-70b "${c[@]}" --step-time 10
expect_error "--achieved-tflops describes a measured run of this layout, but the layout does not fit" \
  plan --model llama2-70b "${c[@]}" --achieved-tflops 300
expect_error "--largest-layer sizes --offload's table .*: add --offload, or drop --largest-layer" \
  plan --model llama2-70b "${c[@]}" --largest-layer 1000000

# Not fitting is a report, not an error: exit 0 and say by how much.
expect_output "DOES NOT FIT, over by" plan --model llama2-70b "${c[@]}"
finish
