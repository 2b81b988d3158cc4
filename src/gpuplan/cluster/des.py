"""A discrete-event core: a heap of events ordered by (time, priority, sequence).

Ties in time go to the lower priority number, then to the event scheduled first, so a run is
deterministic. A handler receives the simulator and its arguments and returns follow-up events
as (time, priority, handler, args) tuples (or nothing), which the core schedules.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from enum import IntEnum

Event = tuple  # (time_s, priority, handler, args)


class EventPriority(IntEnum):
    """Order of events at the same simulated time (lower first): capacity changes (failures,
    repairs, spot reclaims, grace periods ending) before arrivals, arrivals before finishes, so a
    scheduling pass at that time sees the cluster as it now is."""

    CAPACITY = 0
    ARRIVAL = 1
    FINISH = 2


class Simulator:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.events = 0

    def schedule(self, time_s: float, priority: int, handler: Callable, *args) -> None:
        if time_s < self.now:
            raise ValueError(f"cannot schedule in the past: {time_s} < {self.now}")
        heapq.heappush(self._heap, (time_s, priority, self._seq, handler, args))
        self._seq += 1

    def run(self, until: float = math.inf, check: Callable[[Simulator], None] | None = None, every: int = 4096) -> None:
        """Run events in order until none is left (or past ``until``); ``check(self)`` is called
        every ``every`` events: it may report progress or raise to end a run that cannot end."""
        heap, push, pop = self._heap, heapq.heappush, heapq.heappop
        while heap:
            if heap[0][0] > until:
                break
            t, prio, _, handler, args = pop(heap)
            self.now = t
            self.events += 1
            if check is not None and not self.events % every:
                check(self)
            follow: Iterable[Event] | None = handler(self, *args)
            if follow:
                for ft, fp, fh, fa in follow:
                    push(heap, (ft, fp, self._seq, fh, fa))
                    self._seq += 1

    def stop(self) -> None:
        """End the run: drop every pending event (open-ended processes, like failures, never end)."""
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)
