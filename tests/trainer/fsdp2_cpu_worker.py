"""One rank of test_fsdp_cpu.py (run under torch.distributed.run, 2 CPU processes, gloo).

Accelerate runs FSDP only on GPU backends, so this shards the trainer's own model wrapper
(``policy.LogProbs`` around a tiny Qwen2) with torch's ``fully_shard`` the way Accelerate's
FSDP2 does (each decoder layer, then the root), and checks against an unsharded copy: the
micro-batched gradients of one GRPO pass (gathered from the shards), and greedy generation with
the weights gathered by ``distributed.gathered_for_generation``. Writes rank<N>.json to argv[1].
"""
import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(out: Path) -> None:
    from accelerate import Accelerator
    from torch.distributed.fsdp import fully_shard

    from rlguard_trainer.distributed import gathered_for_generation
    from rlguard_trainer.grpo import group_advantages
    from rlguard_trainer.modeling import build_tiny
    from rlguard_trainer.policy import LogProbs
    from rlguard_trainer.rollout import generate, prompt_texts
    from rlguard_trainer.step import accumulate_gradients

    acc = Accelerator(cpu=True)  # initialises the gloo process group
    tok, lm = build_tiny(0)  # same seed: the same weights on both ranks
    plain = LogProbs(copy.deepcopy(lm))
    texts = prompt_texts(tok, ["abc:1>", "hg:2>", "a:3>"], chat_template=False)
    roll = generate(plain.lm, tok, texts, 2, 6, 1.0, greedy=True)
    sharded = LogProbs(lm)
    for layer in sharded.lm.model.layers:
        fully_shard(layer)
    fully_shard(sharded)
    assert type(sharded.lm.lm_head.weight).__name__ == "DTensor"

    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.0, 1.0])
    grads = {}
    for name, model in (("plain", plain), ("sharded", sharded)):
        ref = torch.zeros(roll.completion_mask.shape)
        accumulate_gradients(acc, model, roll, group_advantages(rewards, 2), ref, None, micro_batch=2, beta=0.1,
                             epsilon=0.2)
        grads[name] = {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad)
                       for n, p in model.named_parameters()}
    worst = max((grads["sharded"][n] - g).abs().max().item() for n, g in grads["plain"].items())
    with gathered_for_generation(sharded):
        again = generate(sharded.lm, tok, texts, 2, 6, 1.0, greedy=True)
    result = {"rank": dist.get_rank(), "params": len(grads["plain"]), "max_grad_diff": worst,
              "grad_sum": sum(g.abs().sum().item() for g in grads["plain"].values()),
              "same_generation": torch.equal(again.input_ids, roll.input_ids)}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    # leave together and tear gloo down before the interpreter exits: a rank that exits while
    # its peer's gloo threads still run dies in C++ ("terminate called without an active
    # exception", SIGABRT), about one run in seven without this
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
