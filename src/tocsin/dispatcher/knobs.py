"""Every constant that tunes the dispatcher's delivery path, named once.

Each has one line of why here; the measurements behind them are in docs/architecture.md
("The delivery engine: knobs") and docs/benchmarks.md. Settings an operator changes
(room, threads, deadlines, breakers) are in :class:`tocsin.config.Settings`, not here.
"""

from __future__ import annotations

__all__ = [
    "ACK_ROWS", "ADOPT_KEYS", "ADOPT_LAG_MS", "ADOPT_MS", "ADOPT_QUIET_MS", "AHEAD_CHUNKS",
    "AHEAD_ROWS", "BACKLOG_LAG_MS", "BACKLOG_NICE", "BACKSTOP_MS", "CHANNEL_IDLE_MS",
    "CHANNEL_SWEEP_MS", "CLAIM_MARKER_KEEP_MS", "CLAIM_MARKER_PRUNE_MS", "CLAIM_ROWS",
    "CLOSE_GRACE_MS", "COVER_MS", "HOLD_MS", "KEY_RUN_BUDGET_MS", "LINGER_MS", "LOOK_AHEAD",
    "LOOP_TICK_MS", "PEER_COVER_MS", "PEER_LATE_MS", "PEER_LOOK_MS", "POLL_MS", "PULL_CHUNKS",
    "PULL_EPOCH_MS", "RACE_PAUSE_MS", "READER_LAG_MS", "RELAY_ZONE_MS", "SEND_GRACE_MS",
    "WAKE_AHEAD_MS", "WEIGHT_TTL_MS", "WORKER_IDLE_MS", "WORK_OUT_BATCH_MS",
]

# -- claims ------------------------------------------------------------------------------------
CLAIM_ROWS = 1_000
"""Most rows one claim (and one send, one pull) takes: a claim holds the store's writer."""
READER_LAG_MS = 1_000
"""With hand-over windows, a micro-batch claims only what has been due this long."""
POLL_MS = 100
"""A waiting hand-over window looks at the store at least this often."""
LOOK_AHEAD = 16
"""How many next due instants a window's look finds; it claims at each in turn and looks again
after them or after :data:`POLL_MS`. A look before every claim, on PostgreSQL at 200 due
instants a second, took the window longer than the 5 ms between two (a look of three round
trips and a claim of five): it fell behind, p50 7-10 ms late where SQLite was 2."""
RACE_PAUSE_MS = 5
"""After a claim that found nothing it was told of; doubles up to :data:`POLL_MS`."""
AHEAD_ROWS = 2 * CLAIM_ROWS
"""A window whose engine has this many rows queued waits before its next claim."""
BACKSTOP_MS = 100
"""Outside its zone, the relay hands over a schedule that nobody took this long after it fell
due (and not yet :data:`READER_LAG_MS`: older is a backlog, the batches' to take): the main
query's next window opens late when a batch turns over slowly, and rows due in that gap waited
for it, up to a second (p90 of a 10 000-destination run ramped from 1 s to 0.2 s over the
second half of the period)."""
RELAY_ZONE_MS = 1_000
"""The relay's zone, right after each turn of the main grid, lasts this long (or half a window,
if shorter): the batch turn (commit, planning, task launch) leaves rows late for 0.4 s after it
on two cores, and past that the main window claims alone; the relay there only backs it up
(:data:`BACKSTOP_MS`). Over half of a longer window, the two would claim the same instants in
turn for nothing."""
COVER_MS = 500
"""Once it found such a schedule, the relay hands over at due instants this long, then looks
again (overlapping the main window that opened meanwhile for at most this)."""
KEY_RUN_BUDGET_MS = 1_000
"""Without a window, how long a task keeps claiming the next heads of its keys."""
CLAIM_MARKER_KEEP_MS = 24 * 3600 * 1000
"""Replay markers are kept a day: far longer than any replay or lease."""
CLAIM_MARKER_PRUNE_MS = 300_000
"""Replay markers are pruned at most this often."""
WORKER_IDLE_MS = 60_000
"""Spark stops a pool of Python workers idle for this long (hard-coded in Spark)."""
WAKE_AHEAD_MS = 5_000
"""After a quiet spell, a batch starts this much ahead of the next due schedule."""
WORK_OUT_BATCH_MS = 10_000
"""While this run's engines hold claimed rows, a batch runs at least this often, due or not.
An engine lives in a Spark Python worker, which sits in Spark's idle pool between tasks while
its threads send: Spark stops workers idle for :data:`WORKER_IDLE_MS`, and a local session
at rest for 20 s (``tocsin.spark.rest.REST_S``) retires them sooner. A backlog the engine pulls
itself is passed over by the batches' claims, so without this a drain longer than 20 s lost its
engine mid-send, and its rows waited for the lease."""

PEER_LOOK_MS = 50
"""A dispatcher that shares the buckets looks this often in each other member's buckets for a
schedule left overdue (:mod:`tocsin.dispatcher.cover`): one indexed read per member."""
PEER_LATE_MS = 50
"""A schedule this long past its due time in another member's buckets makes this dispatcher
cover for that member (a frozen one keeps its buckets until its beats time out, 5 s)."""
PEER_COVER_MS = 500
"""A cover's window: after each, it goes on while the covered member has not beaten since it
was found behind (a live one beats every second)."""
# -- the delivery engine -----------------------------------------------------------------------
AHEAD_CHUNKS = 2
"""A destination sends while fewer than this many chunks wait for their acknowledgement."""
ACK_ROWS = 2 * CLAIM_ROWS
"""Most backlog verdicts the store-writer writes in one round (a trickle's go first)."""
HOLD_MS = 10_000
"""A busy hold lasts this long unless renewed (renewed at half): a dead process's expires."""
SEND_GRACE_MS = 2_000
"""How long past the send deadline the engine still waits for a channel's answer."""
PULL_CHUNKS = 4
"""A destination with a backlog keeps at most this many chunks queued or unacknowledged."""
LINGER_MS = 100
"""A backlog that caught up waits for its next schedule when it falls due within this."""
PULL_EPOCH_MS = 60_000
"""The puller takes a new epoch this often (a dead run's release finds its claims)."""
ADOPT_MS = 500
"""While another process holds a destination busy, the backlog puller looks this often for
backlogs other processes pull, and pulls them too: the batches pass a held destination over,
so a backlog stayed with the one process that first held it (a webhook drain ran at 3 800/s on
one core or 7 000-10 000/s on two, by chance)."""
ADOPT_QUIET_MS = 2_000
"""How often it looks while its last look found no other process busy: at rest, every process
of the run looking every 500 ms put the dispatcher's idle CPU after the spine benchmark's
bursts at 2.1 % of a core (1.3-1.9 % in the eight runs before)."""
ADOPT_KEYS = 8
"""At most this many such destinations are tried each time (a pull is a write)."""
ADOPT_LAG_MS = 200
"""Only a destination with a row due this long ago is behind its holder, a stream to share:
an on-time stream held busy stays with its process (three pullers of one stream contend for
the store's writer, for nothing). One process's engine carries about 5 000-6 000 webhooks a
second on its core; a 5 000/s stream held by one process that hiccuped fell behind, and with
shares taken only after 1 s, looked for every 2 s, it took seconds to catch up (p99 1.1-2.3 s
in nine runs of eleven at 5 000/s on SQLite); after 200 ms, looked for every 500 ms,
45-662 ms in six runs."""
BACKLOG_LAG_MS = 1_000
"""A pulling destination whose last pull found a row due this long ago is a backlog: its
pulls, sends and acknowledgements yield the CPU to on-time work (:data:`BACKLOG_NICE`)."""
BACKLOG_NICE = 10
"""How many nice levels below the dispatcher's own the backlog puller and the backlog send pool
run: on-time work gets the CPU first (a dispatcher started under ``nice`` keeps the
difference). Only a destination that is behind (:data:`BACKLOG_LAG_MS`) runs there; one that
pulls because its stream is fast (5 000 webhooks a second queue 256 rows in 50 ms) keeps the
dispatcher's priority, beside another tenant's backlog as well as alone."""
LOOP_TICK_MS = 100
"""The engine's loop looks at its timers at least this often (a manual clock moved)."""
WEIGHT_TTL_MS = 5_000
"""A tenant's weight is read again at most this often."""
CHANNEL_IDLE_MS = 600_000
"""A destination's channel unused this long is closed: an idle destination keeps nothing open."""
CHANNEL_SWEEP_MS = 60_000
"""The engine looks for idle channels this often."""
CLOSE_GRACE_MS = 2_000
"""Closing waits this long past the send deadline for sends in flight, then leaves them."""
