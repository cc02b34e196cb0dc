"""The task: training and held-out prompts, the gold-answer column if any, the rewards.

``load_task`` builds it from ``--dataset``/``--reward`` (``data.py``, ``rewards.py``) or, by
default, from the toy verifiable task below, with its character tokenizer built offline.

Prompt ``"cab:7>"``: three letters, a digit, ``>``. The answer repeats the digit; the reward
is the fraction of the ``max_new_tokens`` completion positions that hold it (so an early EOS
or a wrong character costs). A randomly initialised tiny model starts near 1/vocab and learns
it within a minute of CPU time: enough to watch reward rise and rlguard at work, and small
enough for tests. Prompts are split by a hash into training (90%) and held-out (10%) sets.
"""
from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass

from .config import TrainConfig
from .data import check_columns, load_rows
from .rewards import Reward, load_rewards

LETTERS = "abcdefgh"
DIGITS = "0123456789"
ALPHABET = DIGITS + LETTERS + ":>"
SPECIAL = ["<pad>", "<bos>", "<eos>"]


def build_tokenizer():
    """A character-level ``PreTrainedTokenizerFast``: no download, saved/loaded like any other."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + list(ALPHABET))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                  eos_token="<eos>")
    tok.padding_side = "left"  # prompts are left-padded for generation
    return tok


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str  # the gold completion


def all_examples(length: int) -> list[Example]:
    out = []
    for letters in itertools.product(LETTERS, repeat=3):
        for d in DIGITS:
            out.append(Example("".join(letters) + ":" + d + ">", d * length))
    return out


def split(examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """Deterministic 90/10 split on a hash of the prompt."""
    train, held = [], []
    for ex in examples:
        (held if hashlib.sha1(ex.prompt.encode()).digest()[0] < 26 else train).append(ex)
    return train, held


def digit_of(prompt: str) -> str:
    return prompt[-2]


def echo_reward(prompt: str, completion: str, length: int) -> float:
    """Fraction of the ``length`` completion positions that repeat the prompt's digit."""
    d = digit_of(prompt)
    return sum(c == d for c in completion[:length]) / length


def constant_reward(prompt: str, completion: str, length: int) -> float:
    """A broken reward function (fault injection): the same value whatever the completion."""
    return 0.5


def echo_digit(prompts, completions, answer, **_) -> list[float]:
    """The toy reward with TRL's signature: the fraction of the gold answer's positions the
    completion matches (``echo_reward`` of each completion, the gold answer being the digit
    repeated ``max_new_tokens`` times)."""
    return [sum(c == a for c, a in zip(comp, ans)) / len(ans) for comp, ans in zip(completions, answer)]


def constant(prompts, completions, **_) -> list[float]:
    """A broken reward function with TRL's signature (fault injection)."""
    return [constant_reward("", "", 1) for _ in prompts]


@dataclass
class Task:
    train: list[dict]  # rows: the prompt column and any other columns (passed to the rewards)
    held_out: list[dict]
    rewards: list[Reward]
    prompt_column: str = "prompt"
    answer_column: str | None = None  # gold answers: a validation loss is logged only with them

    def prompts(self, rows: list[dict]) -> list:
        return [row[self.prompt_column] for row in rows]

    def columns(self, rows: list[dict], repeat: int) -> dict[str, list]:
        """Every column but the prompt, each value repeated for the ``repeat`` completions of its row."""
        names = sorted({k for row in rows for k in row} - {self.prompt_column})
        return {k: [row.get(k) for row in rows for _ in range(repeat)] for k in names}


def load_task(cfg: TrainConfig) -> Task:
    rewards = load_rewards(cfg.rewards) if cfg.rewards else [Reward("echo_digit", echo_digit)]
    if not cfg.dataset:
        train, held = split(all_examples(cfg.max_new_tokens))
        rows = lambda exs: [{"prompt": e.prompt, "answer": e.answer} for e in exs]  # noqa: E731
        return Task(rows(train), rows(held), rewards, "prompt", "answer")
    train = load_rows(cfg.dataset)
    answer = check_columns(train, cfg.dataset, cfg.prompt_column, cfg.answer_column)
    held = []
    if cfg.eval_dataset:
        held = load_rows(cfg.eval_dataset, "--eval-dataset")
        check_columns(held, cfg.eval_dataset, cfg.prompt_column, answer, "--eval-dataset")
    return Task(train, held, rewards, cfg.prompt_column, answer)


class PromptSampler:
    """Epoch-style sampling without replacement, reshuffled each pass, seeded per process."""

    def __init__(self, examples: list, seed: int) -> None:
        self.examples = list(examples)
        self.rng = random.Random(seed)
        self.order: list[int] = []
        self.epoch = 0

    def next(self, n: int) -> list:
        out = []
        while len(out) < n:
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
                self.epoch += 1
            out.append(self.examples[self.order.pop()])
        return out

    def state_dict(self) -> dict:
        return {"order": self.order, "epoch": self.epoch, "rng": self.rng.getstate()}

    def load_state_dict(self, s: dict) -> None:
        self.order, self.epoch = list(s["order"]), int(s["epoch"])
        st = s["rng"]
        self.rng.setstate((st[0], tuple(st[1]), st[2]))
