"""Several processes through Accelerate's own engines (DDP, FSDP, DeepSpeed ZeRO), chosen by
``accelerate launch --config_file`` (examples in ``trainer/configs/``).

The policy goes through ``accelerator.prepare``. The frozen reference is prepared the same way
for inference: sharded like the policy under FSDP (and ZeRO-3), replicated otherwise.
Generation runs on the wrapped model with its sharded weights gathered for the duration.
Metrics are averaged over ranks; rank 0 alone runs rlguard (``guard.py``).
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch


def is_fsdp(acc) -> bool:
    return acc.distributed_type.value == "FSDP"


def is_deepspeed(acc) -> bool:
    return acc.distributed_type.value == "DEEPSPEED"


def configure_engine(acc, micro_batch: int) -> None:
    """DeepSpeed wants its micro-batch size before ``prepare`` (there is no dataloader to read
    it from); the gradient-accumulation boundaries are the trainer's own (``accumulating``)."""
    if is_deepspeed(acc):
        config = acc.state.deepspeed_plugin.deepspeed_config
        config["train_micro_batch_size_per_gpu"] = micro_batch
        config["gradient_accumulation_steps"] = 1


def prepare_reference(acc, ref: torch.nn.Module) -> torch.nn.Module:
    """The reference model, frozen, placed and sharded for inference like the policy."""
    ref.eval().requires_grad_(False)
    if is_fsdp(acc):
        plugin = acc.state.fsdp_plugin
        if plugin.fsdp_version == 2:
            from accelerate.utils.fsdp_utils import fsdp2_prepare_model

            return fsdp2_prepare_model(acc, ref).eval()
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        plugin.set_auto_wrap_policy(ref)
        return FSDP(ref, sharding_strategy=plugin.sharding_strategy or plugin.reshard_after_forward,
                    cpu_offload=plugin.cpu_offload,
                    auto_wrap_policy=plugin.auto_wrap_policy, mixed_precision=plugin.mixed_precision_policy,
                    use_orig_params=plugin.use_orig_params, device_id=acc.device).eval()
    if is_deepspeed(acc):
        return _deepspeed_inference(acc, ref)
    return acc.prepare_model(ref, evaluation_mode=True)


def _deepspeed_inference(acc, ref):
    """ZeRO-3: the reference is sharded as the policy; ZeRO-1/2: replicated (stage 0), as TRL does."""
    import copy

    import deepspeed

    config = copy.deepcopy(acc.state.deepspeed_plugin.deepspeed_config)
    for key in ("optimizer", "scheduler"):
        config.pop(key, None)
    config["zero_optimization"].pop("offload_optimizer", None)
    if config["zero_optimization"].get("stage") != 3:
        config["zero_optimization"]["stage"] = 0
    engine, *_ = deepspeed.initialize(model=ref, config=config)
    return engine.eval()


@contextmanager
def gathered_for_generation(model):
    """Full weights on every rank while ``generate`` runs on the unwrapped model (FSDP1, FSDP2,
    ZeRO-3); nothing to do for DDP or one process."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    try:
        from torch.distributed.fsdp import FSDPModule  # FSDP2, torch >= 2.6
    except ImportError:
        FSDPModule = ()  # noqa: N806 - isinstance(x, ()) is False
    if isinstance(model, FSDP):
        with FSDP.summon_full_params(model, recurse=False):  # inner units gather in their forward
            yield
    elif isinstance(model, FSDPModule):
        model.unshard()
        try:
            yield
        finally:
            model.reshard()
    elif hasattr(model, "zero_optimization_stage") and model.zero_optimization_stage() == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters())):
            yield
    else:
        yield


@contextmanager
def accumulating(acc, model, last: bool):
    """One micro-batch's backward: gradients accumulate locally and are reduced across ranks
    only on the ``last`` (``no_sync`` for DDP/FSDP; DeepSpeed's engine is told the boundary
    through Accelerate's sync flag, which its ``backward`` reads, and steps only there)."""
    acc.gradient_state._set_sync_gradients(last)  # what Accelerate's own accumulate() sets
    try:
        with nullcontext() if last or is_deepspeed(acc) else acc.no_sync(model):
            yield
    finally:
        acc.gradient_state._set_sync_gradients(True)


def full_state_dict(acc, model) -> dict[str, torch.Tensor]:
    """The wrapped language model's full state dict (gathered from the shards; every rank must
    call this), keys as ``save_pretrained`` expects them."""
    state = acc.get_state_dict(model)
    return {k[len("lm."):]: v for k, v in (state or {}).items() if k.startswith("lm.")}


def rank_sum(acc) -> int:
    """An all-reduce of the rank ids: proof that the processes really talk."""
    t = torch.tensor([float(acc.process_index)], device=acc.device)
    return int(acc.reduce(t, reduction="sum").item()) if acc.num_processes > 1 else 0


def mean_over_ranks(acc, metrics: dict[str, float]) -> dict[str, float]:
    if acc.num_processes == 1:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=acc.device)
    t = acc.reduce(t, reduction="mean")
    return {k: float(v) for k, v in zip(keys, t.tolist())}


def gather_rows(acc, t: torch.Tensor) -> torch.Tensor:
    """Every rank's rows of ``t`` (same shape on every rank), concatenated in rank order."""
    return acc.gather(t.to(acc.device)) if acc.num_processes > 1 else t
