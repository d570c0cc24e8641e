"""The memory plan: the peak device memory of each phase of a run (update, log-prob passes, rollout engine),
predicted from the model's shape and the config before anything is loaded, and the largest micro-batch token
budget that fits.

Why: a run that fits step 1 must fit step 100. AdamW's fp32 state first appears at step 1's optimizer step, the
engine's KV cache is sized once at start-up, and activations grow with the micro-batch; none of it showed before
an OOM in step 2 (issue 36). So the optimizer state is counted from the start, and the plan names the switch or
the budget that makes a run fit, in one line.

Per rank, in bytes (P parameters, W ranks sharing the FSDP2 group, b compute bytes, m master bytes: fp32 under
FSDP2 on CUDA, else b):

- kept: params m·P/W, gradients m·P/W, AdamW moments 2·m·P/W (all on CPU with ``model.cpu_offload``), the frozen
  reference b·P/W (``kl_coef > 0``; on CPU with ``model.ref_offload``), the critic like the policy (PPO);
- with LoRA adapters (``model.lora``, A adapter parameters from rank, target modules and shape: ``Adapters``) the
  policy keeps its frozen base in b (b·P/W) and only the fp32 adapters have gradients and AdamW moments
  (4·A/W + 4·A/W + 8·A/W); the reference is the base with the adapters off (no second model); a layer's saved
  activations grow by each adapted linear's low-rank input (``Adapters.saved_bytes``);
- gathered by FSDP2 while a micro-batch runs: the root (embeddings, head) and two decoder layers in b (every
  layer with ``reshard_after_forward=false``), a layer's unsharded gradients in b and the reduce dtype;
- saved activations per token of one decoder layer (``layer_saved_bytes``: what autograd keeps for backward in
  the HF Llama/Qwen2/Qwen3 decoder layer; counted tensor by tensor on CPU, tests/rl/test_memory_plan.py), a
  checkpointed layer keeps only its input (b·h); ``model.activation_offload`` moves them all to host memory;
- the log-prob head's transient: one chunk of ``chunk_tokens`` x vocab logits in b and fp32;
- the engine: weights (engine dtype), KV cache 2·layers·kv_heads·head_dim·b per token for max_num_seqs
  sequences of max_model_len tokens, and vLLM's own working set (``engine_overhead``); awake, it holds its
  whole ``gpu_memory_utilization`` share (``EnginePlan.held``), asleep ``ENGINE_ASLEEP``;
- the weight hand-off: one bucket of ``rollout.handoff_bucket_mb`` in the engine dtype and the largest tensor
  gathered in the master dtype (``handoff_bytes``).

The step's phases on a colocated device: generation (trainer's states + the engine's share), hand-off (the same
+ buckets), update (the engine asleep, or awake with ``rollout.sleep=false``) and log-prob passes; the step's
peak is the largest (``MemoryPlan.phases``). A share that leaves the trainer no room is refused with the share
that fits or sleep mode (``engine_advice``); a planned engine gets its KV cache in bytes
(``kv_cache_memory_bytes``), a fixed share lets vLLM fill it.

The package reads ``config.json`` as JSON and imports no torch: ``rrl doctor`` and ``rrl train --dry-run`` plan
a run without loading anything. Dense decoders only (llama, qwen2, qwen3, mistral families).

Modules, bottom up: ``shapes`` (a model's sizes from its ``config.json``, LoRA adapters on it), ``update`` (a
training rank's kept, gathered and activation bytes, the update and log-prob peaks, the largest budget),
``engine`` (a vLLM engine's weights, KV cache and working set), ``advice`` (the one-line fix of a run that does
not fit), ``plan`` (a rank's whole plan, ``plan_run``), ``targets`` (machines to plan for from elsewhere:
``rrl train --dry-run --plan-for``).
"""
