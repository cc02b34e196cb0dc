"""The causal LM as the function GRPO needs: token ids in, log p(completion tokens) out.

``LogProbs`` wraps a Hugging Face causal LM. Its forward runs the decoder, keeps the hidden
states of the real completion tokens only, and takes their log-probs (and entropies) through
the output layer in chunks (``logprobs.py``), so the full [batch, length, vocab] logits never
exist. Accelerate prepares this module (DDP, FSDP, DeepSpeed): its forward is the root forward,
so a sharding engine gathers every weight it touches, the output layer included. Generation
uses the wrapped model (``.lm``) directly.
"""
from __future__ import annotations

import torch

from .logprobs import chunk_rows, chunked_log_probs


class LogProbs(torch.nn.Module):
    def __init__(self, lm, chunk_mb: float = 64.0) -> None:
        super().__init__()
        self.lm = lm
        self.rows = chunk_rows(lm.config.get_text_config().vocab_size, chunk_mb)
        self.softcap = getattr(lm.config.get_text_config(), "final_logit_softcapping", None)
        # FSDP's transformer auto-wrap policy looks for the decoder layer classes here
        self._no_split_modules = getattr(lm, "_no_split_modules", None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_mask: torch.Tensor,
                with_entropy: bool = False, entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids`` [B, P+T] (prompt then completion), ``completion_mask`` [B, T]: per-token
        log-probs and entropies [B, T] of the completion, 0 where the mask is 0."""
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.lm.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                       position_ids=position_ids, use_cache=False).last_hidden_state
        t = completion_mask.shape[1]
        keep = completion_mask.bool()
        h = hidden[:, -t - 1:-1][keep]  # the state before each completion token predicts it
        targets = input_ids[:, -t:][keep]
        logp, ent = chunked_log_probs(self.lm.get_output_embeddings(), h, targets, self.rows,
                                      with_entropy=with_entropy, entropy_grad=entropy_grad, softcap=self.softcap)
        zeros = torch.zeros(completion_mask.shape, dtype=torch.float32, device=input_ids.device)
        return zeros.masked_scatter(keep, logp), zeros.masked_scatter(keep, ent)
