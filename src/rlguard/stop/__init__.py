"""What the training loop and the daemon exchange in a run's directory: the stop request,
the run's incarnation, its heartbeat, and the safe file writes they use (stdlib only)."""
