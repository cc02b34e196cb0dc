"""Outbox: idempotent on key across restarts, due/retry/dead bookkeeping, redacted errors."""
from __future__ import annotations

import sqlite3

import pytest

from rlguard.notify import Outbox

SECRET_URL = "https://hooks.slack.com/services/T0001/B0001/abcdefSECRET"


def test_enqueue_is_idempotent_on_key_even_after_reopening(tmp_path):
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    assert box.enqueue("k1", "slack", {"n": 1}) is True
    assert box.enqueue("k1", "slack", {"n": 2}) is False
    box.close()
    box = Outbox(path)  # a restart
    assert box.enqueue("k1", "slack", {"n": 3}) is False
    assert [(i.key, i.payload) for i in box.due(0)] == [("k1", {"n": 1})]
    box.mark_sent(box.due(0)[0].id, now=5)
    box.close()
    box = Outbox(path)  # sent keys are remembered too
    assert box.enqueue("k1", "slack", {"n": 4}) is False
    assert box.due(10**9) == [] and box.stats() == {"pending": 0, "sent": 1, "dead": 0}


def test_reopening_without_close_sees_every_committed_change(tmp_path):
    path = tmp_path / "outbox.db"
    box = Outbox(path)
    box.enqueue("a", "slack", {})
    box.enqueue("b", "slack", {})
    box.mark_sent(box.get("a").id, now=1)  # no close(): as if the process were killed here
    other = Outbox(path)
    assert other.stats() == {"pending": 1, "sent": 1, "dead": 0}
    assert [i.key for i in other.due(1)] == ["b"]


def test_wal_mode_is_on(tmp_path):
    Outbox(tmp_path / "o.db")
    conn = sqlite3.connect(tmp_path / "o.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_due_respects_next_attempt_and_channel(tmp_path):
    box = Outbox(tmp_path / "o.db")
    box.enqueue("a", "slack", {})
    box.enqueue("b", "slack", {})
    box.enqueue("c", "email", {})
    a = box.get("a")
    assert box.mark_retry(a.id, now=100, delay=30, error="boom") == 1
    assert [i.key for i in box.due(100, channel="slack")] == ["b"]
    assert [i.key for i in box.due(129.9)] == ["b", "c"]
    assert [i.key for i in box.due(130)] == ["b", "c", "a"]  # oldest due first
    assert box.get("a").attempts == 1 and box.get("a").next_attempt == 130


def test_retry_counts_attempts_and_dead_is_final(tmp_path):
    box = Outbox(tmp_path / "o.db")
    box.enqueue("a", "slack", {})
    item = box.get("a")
    assert box.mark_retry(item.id, now=0, delay=1, error="e1") == 1
    assert box.mark_retry(item.id, now=1, delay=1, error="e2") == 2
    box.mark_dead(item.id, "HTTP 404: no_service", now=2)
    dead = box.get("a")
    assert (dead.state, dead.attempts, dead.last_error) == ("dead", 3, "HTTP 404: no_service")
    assert box.due(10**9) == []
    box.mark_sent(item.id, now=3)  # a dead item does not come back to life
    assert box.stats() == {"pending": 0, "sent": 0, "dead": 1}


def test_errors_are_stored_with_secrets_redacted(tmp_path):
    box = Outbox(tmp_path / "o.db")
    box.enqueue("a", "slack", {})
    box.enqueue("b", "slack", {})
    box.mark_retry(box.get("a").id, 0, 5, f"POST {SECRET_URL} failed; Authorization: Bearer xoxb-123-456-abc")
    box.mark_dead(box.get("b").id, f"bad webhook {SECRET_URL}")
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("o.db*"))
    for key in ("a", "b"):
        err = box.get(key).last_error
        assert "SECRET" not in err and "xoxb" not in err and "[REDACTED]" in err
    assert b"abcdefSECRET" not in raw and b"xoxb-123" not in raw


def test_an_attempt_that_never_finished_is_flagged_interrupted_after_restart(tmp_path):
    path = tmp_path / "o.db"
    box = Outbox(path)
    box.enqueue("a", "slack", {})
    box.enqueue("b", "slack", {})
    box.mark_sending(box.get("a").id)  # ... and the process dies mid-request
    box.mark_sending(box.get("b").id)
    box.mark_retry(box.get("b").id, 0, 0, "HTTP 500")  # this one finished (failed)
    after = {i.key: i.interrupted for i in Outbox(path).due(0)}
    assert after == {"a": True, "b": False}


def test_payload_round_trips_unicode(tmp_path):
    box = Outbox(tmp_path / "o.db")
    box.enqueue("k", "slack", {"run": "exp-π-🚀", "v": [1, None]})
    assert box.get("k").payload == {"run": "exp-π-🚀", "v": [1, None]}


def test_enqueue_many_saves_messages_and_state_in_one_transaction(tmp_path):
    box = Outbox(tmp_path / "o.db")
    assert box.enqueue_many([("a", "slack", {}), ("b", "slack", {})], state={"router": {"v": 1}}) == 2
    assert box.load_state("router") == {"v": 1} and box.load_state("other") is None
    with pytest.raises(sqlite3.Error):  # the second row cannot be bound: after "c" was inserted
        box.enqueue_many([("c", "slack", {}), ("d", ["not", "a", "str"], {})],
                         state={"router": {"v": 2}})
    assert box.get("c") is None and box.load_state("router") == {"v": 1}  # all or nothing
    assert box.stats()["pending"] == 2
    with pytest.raises(ValueError, match="non-empty string"):
        box.enqueue("", "slack", {})


def test_prune_forgets_only_old_delivered_items(tmp_path):
    from rlguard.notify.outbox import Outbox

    box = Outbox(tmp_path / "o.sqlite3")
    box.enqueue("old", "slack", {"text": "a"}, now=0.0)
    box.enqueue("new", "slack", {"text": "b"}, now=0.0)
    box.enqueue("waiting", "slack", {"text": "c"}, now=0.0)
    ids = {i.key: i.id for i in box.due(10.0)}
    box.mark_sent(ids["old"], 100.0)
    box.mark_sent(ids["new"], 10_000.0)
    assert box.prune(now=10_050.0, older_than=1_000.0) == 1
    assert box.get("old") is None and box.get("new") is not None and box.get("waiting") is not None
    assert box.enqueue("old", "slack", {"text": "a"}, now=20_000.0)  # a pruned key is accepted again
    assert box.stats() == {"pending": 2, "sent": 1, "dead": 0}
