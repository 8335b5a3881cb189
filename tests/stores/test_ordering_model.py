"""A stateful test of the ordering and task-key rules against a small model of them:
create / overwrite / cancel / reschedule / fire / fail / complete, in any order."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tocsin.domain import Ack, NewSchedule, Outcome, Status
from tocsin.errors import ConflictError
from tocsin.stores.sqlite import SQLiteStore

NOW = 1_800_000_000_000
KEYS = st.sampled_from(["a", "b", None])


@dataclass
class Row:
    """The model's view of one schedule."""

    seq: int
    key: str | None
    task: str | None
    due: int
    payload: bytes
    status: Status = Status.PENDING
    attempt: int = 1
    epoch: int | None = None


class OrderingRules(RuleBasedStateMachine):
    """The store against the model, with every schedule already due."""

    def __init__(self) -> None:
        super().__init__()
        self.store = SQLiteStore(":memory:", buckets=4)
        self.rows: dict[str, Row] = {}
        self.made = 0

    def teardown(self) -> None:
        self.store.close()

    def _with(self, status: Status) -> list[str]:
        return sorted(i for i, r in self.rows.items() if r.status is status)

    def _claimable(self) -> set[str]:
        heads = set()
        for sid, row in self.rows.items():
            if row.status is not Status.PENDING:
                continue
            rivals = [r for i, r in self.rows.items() if i != sid and row.key is not None
                      and r.key == row.key and r.status in (Status.PENDING, Status.CLAIMED)]
            if not any(r.status is Status.CLAIMED or (r.due, r.seq) < (row.due, row.seq)
                       for r in rivals):
                heads.add(sid)
        return heads

    @rule(key=KEYS, unique=st.sampled_from([None, "u1", "u2"]), due=st.integers(0, 3),
          payload=st.binary(min_size=1, max_size=3))
    def create(self, key: str | None, unique: str | None, due: int, payload: bytes) -> None:
        due_ms = NOW - 100 + due
        task = None if unique is None else f"{key}:{due_ms}:{unique}"
        # Ids in creation order, not random: a run must replay exactly for hypothesis.
        item = NewSchedule(id=f"S{self.made:06d}", channel="c",
                           payload=payload, due_ms=due_ms, ordering_key=key,
                           key=task, overwrite_pending=task is not None)
        self.made += 1
        holder = next((i for i, r in self.rows.items() if task and r.task == task), None)
        if holder and self.rows[holder].status is Status.CLAIMED:
            try:
                self.store.create([item], now_ms=NOW)
            except ConflictError:
                return
            raise AssertionError("overwriting a firing task key must be refused")
        [(made, created)] = self.store.create([item], now_ms=NOW)
        if holder is None:
            assert created
            self.rows[made.id] = Row(len(self.rows), key, task, due_ms, payload)
        else:
            assert not created and made.id == holder
            if self.rows[holder].status is Status.PENDING:
                self.rows[holder].payload = payload
        assert made.payload == self.rows[made.id].payload

    @precondition(lambda self: self.rows)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.rows)))
        try:
            self.store.cancel(sid, now_ms=NOW)
            assert self.rows[sid].status is Status.PENDING
            self.rows[sid].status = Status.CANCELLED
        except ConflictError as exc:
            assert self.rows[sid].status is not Status.PENDING
            assert exc.status == self.rows[sid].status.value

    @precondition(lambda self: self.rows)
    @rule(data=st.data(), due=st.integers(0, 3))
    def reschedule(self, data: st.DataObject, due: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.rows)))
        try:
            self.store.reschedule(sid, now_ms=NOW, due_ms=NOW - 100 + due)
            assert self.rows[sid].status is Status.PENDING
            self.rows[sid].due = NOW - 100 + due
        except ConflictError:
            assert self.rows[sid].status is not Status.PENDING

    @rule()
    def fire(self) -> None:
        epoch = self.store.next_epoch()
        got = self.store.claim(epoch=epoch, bucket_lo=0, bucket_hi=3, until_ms=NOW, now_ms=NOW,
                               lease_ms=3_600_000, limit=1000)
        assert {r.id for r in got} == self._claimable()
        for r in got:
            assert r.attempt == self.rows[r.id].attempt
            self.rows[r.id].status, self.rows[r.id].epoch = Status.CLAIMED, epoch

    def _ack(self, sid: str, status: Status, outcome: Outcome) -> None:
        row = self.rows[sid]
        assert row.epoch is not None
        applied = self.store.acknowledge(epoch=row.epoch, now_ms=NOW, acks=[Ack(
            schedule_id=sid, delivery_id=f"{sid}-{row.attempt}", attempt=row.attempt,
            outcome=outcome, error=None, started_ms=NOW, ended_ms=NOW, due_ms=row.due,
            status=status, next_ms=NOW if status is Status.PENDING else None)])
        assert applied == 1
        row.status, row.attempt = status, row.attempt + 1

    @precondition(lambda self: any(r.status is Status.CLAIMED for r in self.rows.values()))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        self._ack(data.draw(st.sampled_from(self._with(Status.CLAIMED))), Status.DELIVERED,
                  Outcome.DELIVERED)

    @precondition(lambda self: any(r.status is Status.CLAIMED for r in self.rows.values()))
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        self._ack(data.draw(st.sampled_from(self._with(Status.CLAIMED))), Status.PENDING,
                  Outcome.RETRY)

    @precondition(lambda self: any(r.status is Status.CLAIMED for r in self.rows.values()))
    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        self._ack(data.draw(st.sampled_from(self._with(Status.CLAIMED))), Status.DEAD,
                  Outcome.REJECTED)

    @invariant()
    def statuses_agree(self) -> None:
        for sid, row in self.rows.items():
            stored = self.store.get(sid)
            assert (stored.status, stored.due_ms, stored.payload) == (row.status, row.due,
                                                                      row.payload)


OrderingRules.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                           deadline=None)
TestOrderingRules = OrderingRules.TestCase
