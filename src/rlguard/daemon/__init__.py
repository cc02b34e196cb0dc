"""``rlguard daemon``: tails the logs under its watch roots, judges each run with the engine,
acts (stop requests, checkpoints asked for), notifies (Slack, Alertmanager) and serves its HTTP
face (/metrics, /healthz, /status, POST /stop); its state survives a restart (SQLite)."""
