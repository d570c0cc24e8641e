"""``rrl train --dry-run``: everything a run checks before its first step, without loading weights or training.

Config (already validated by the caller), model path and tokenizer, the LoRA adapters (attached to the model
built on the meta device, as the run attaches them), every data row (read, routed and rendered
through the prompt template), each routed grader and its ``grading.options``, the tool set (built, then
released), the resource request (the run's own checks), the memory plan (printed; a run that cannot fit is
refused with the fix), and the doctor's required checks. With a ``Target`` (``--plan-for h200x8``) the resources
and the plan are those of the target's GPUs, not this machine's, and the doctor (which checks this machine) is
not run.
The first problem raises one of the trainer's user errors, so the CLI prints one line and exits 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from graders.runtime import resolve_grader
from reasoning_rl.config import Config, ConfigError
from reasoning_rl.data import Example, Prompt
from reasoning_rl.policy.model import check_model_path, load_tokenizer
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.resume import TrainError

if TYPE_CHECKING:
    from reasoning_rl.memory_plan.targets import Target


def _check_graders(cfg: Config, examples: list[Example]) -> list[str]:
    """Load each grader the data routes to (every reward component's) and check its options (a bad option
    would mask every sample) and the context fields it declares (each row must have them)."""
    rewards = RewardPlan(cfg.grading)
    terms = {(t.name, t.grader): t for ex in examples for t in rewards.terms(ex)}
    specs = sorted({t.grader for t in terms.values()} | set(cfg.grading.options))
    checks = [(f"grading.options.{spec}", spec, cfg.grading.options.get(spec, {})) for spec in specs]
    if rewards.composed:
        checks += [(f"reward component {t.name!r} ({t.grader})", t.grader, t.options) for t in terms.values()]
    for where, spec, options in checks:
        try:
            grader: Any = resolve_grader(spec)
        except Exception as exc:  # an import error in a plugin names the plugin, not a traceback
            raise ConfigError(f"grader {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
        check = getattr(grader, "check_options", None)
        if check is not None:
            try:
                check(dict(options))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}: {exc}") from exc
    rewards.check(examples)
    return specs


def _check_resources(cfg: Config, target: Target | None) -> str:
    """The real run's own request checks (``distributed.launch``: a split placement with no training rank
    left, more training ranks than rows per update, a tensor-parallel size the ranks cannot give), so the dry
    run refuses exactly what the run would, with the same line; on ``target``'s GPUs when given."""
    from reasoning_rl.cluster import ranks_per_node
    from reasoning_rl.distributed.launch import check_request, check_tensor_parallel, layout
    from reasoning_rl.trainer.build import resolve_device

    if target is not None:
        device = "cuda"
        nodes, per_node = cfg.resources.nodes, ranks_per_node(cfg.resources, device, target.count)
    else:
        try:
            device = resolve_device(cfg.run.device)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        nodes, per_node = layout(cfg.resources, device)
    check_request(cfg, nodes * per_node)
    check_tensor_parallel(cfg, device, per_node)
    return f"{nodes} node(s) x {per_node} rank(s) on {device}"


def _check_tools(cfg: Config, tokenizer: Any) -> str | None:
    """Build the run's tool set (``rollout.tools`` with their ``rollout.tool_options``) as the run does, then
    release it: a misspelled option or a spec that does not load is refused here, in the run's one line."""
    from reasoning_rl.rollout.toolset import ToolSet

    tools = ToolSet.from_config(cfg.rollout, tokenizer)
    if tools is None:
        return None
    tools.close()
    return ", ".join(sorted(tools.tools))


def _memory_plan(cfg: Config, longest: int, target: Target | None) -> list[str]:
    """The run's memory plan on this machine, or on ``target`` (``doctor_checks.memory``), for its longest
    prompt + response limit; a run that cannot fit is refused with the plan's one line (the switch or budget
    that fits). For a target, the largest micro-batch that fits too: what to set there."""
    from reasoning_rl.doctor_checks.memory import config_plan
    from reasoning_rl.memory_plan.shapes import PlanUnavailable

    try:
        plan = config_plan(cfg, longest, target)
    except PlanUnavailable as exc:
        return [f"not made: {exc}"]
    if plan.problem is not None:
        raise ConfigError(plan.problem)
    if target is None:
        return plan.lines()
    seqs = plan.largest // longest
    return [
        *plan.lines(),
        f"largest micro-batch on {target.name}: micro_batch_tokens={plan.largest} per training rank "
        f"({seqs} sequence(s) of {longest} tokens)",
    ]


def show_first_prompts(tokenizer: Any, prompts: list[Prompt], console: Console) -> None:
    """Print the first rendered prompt of each data source exactly as the model gets it (template, system
    prompt and chat template applied, decoded from the prompt's token ids), so a dropped instruction shows."""
    first: dict[str, Prompt] = {}
    for p in prompts:
        first.setdefault(p.example.data_source, p)
    for source, p in first.items():
        text = tokenizer.decode(p.token_ids, skip_special_tokens=False)
        console.print(f"first prompt of {source} ({len(p.token_ids)} tokens):", highlight=False)
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def dry_run(cfg: Config, console: Console, target: Target | None = None) -> None:
    """Validate what ``cfg`` names; print what was checked (for ``target``'s GPUs when given). Raises a user
    error at the first problem."""
    from reasoning_rl.doctor import blocking, run_checks
    from reasoning_rl.trainer.build import load_data

    if target is not None:
        from reasoning_rl.memory_plan.targets import target_engine

        engine = target_engine(cfg.rollout.engine)  # what the checks below see: the target's engine
        cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"engine": engine})})
        console.print(f"planning for {target.describe()}; not this machine", highlight=False)
    check_model_path(cfg.model.path, cfg.model.gguf_file)
    tokenizer = load_tokenizer(
        cfg.model.path, gguf_file=cfg.model.gguf_file, require_chat_template=cfg.data.chat_template is True
    )
    console.print(f"model: {cfg.model.path} (tokenizer loads)")
    if cfg.model.lora.enabled:
        from reasoning_rl.policy.lora import check_targets

        check_targets(cfg.model.path, cfg.model.gguf_file, cfg.model.lora)
        console.print(f"lora: target_modules={cfg.model.lora.target_modules!r} (attached on the meta device)")
    train, val = load_data(cfg, tokenizer, console)
    show_first_prompts(tokenizer, train + val, console)
    specs = _check_graders(cfg, [p.example for p in train + val])
    console.print(f"graders: {', '.join(specs)} (load; options accepted)")
    built = _check_tools(cfg, tokenizer)
    if built is not None:
        console.print(f"tools: {built} (built with their options)")
    console.print(f"resources: {_check_resources(cfg, target)} (request accepted)")
    if cfg.rollout.speculative.on:
        from reasoning_rl.factory import check_speculative, rollout_kind

        check_speculative(cfg, rollout_kind(cfg))
        console.print(f"speculative decoding: {cfg.rollout.speculative.method} (accepted)")
    longest = max((len(p.token_ids) for p in train + val), default=1)
    need = longest + max(cfg.rollout.max_tokens, cfg.eval.max_tokens or 0)
    for line in _memory_plan(cfg, need, target):
        console.print(f"memory plan: {line}", highlight=False)
    if target is not None:
        console.print(f"doctor: not run (it checks this machine, not {target.name})")
    elif cfg.run.doctor:
        stops = blocking(run_checks(cfg, essential_only=True))
        if stops:
            raise TrainError("doctor: " + "; ".join(f"{r.name}: {r.detail} ({r.fix})" for r in stops))
        console.print("doctor: required checks pass")
    console.print(f"dry run ok: {cfg.run_dir} would be written; nothing was trained")
