"""rlguard inside a training loop: the in-loop guard, the transformers/TRL callback over it,
the trackers alerts are written to, and the reward-function watch (torch-free)."""
