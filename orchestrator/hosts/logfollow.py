"""Following `docker compose logs` when the only primitive is `--tail N` (no `since`, no follow):
each `poll()` fetches the last `tail` lines and yields only those not seen before, found per
container (`--tail` applies per container, and the interleaving differs between two calls):

- Exact case: a container that returned fewer lines than asked returned its whole log. Followed
  from its first line, its first `count` lines are the ones we saw, the rest is new; if they do
  not match, its log restarted (`reset` and `gap`, the whole log new) -- unless a single strong
  alignment (below) shows docker's log rotation cut its start (no gap).
- Full window: the alignments `p` where the window's first `p` lines end like the seen lines (up
  to `keep_lines` kept). One is *strong* when it compares at least `min_overlap` lines (or all
  kept) that are not all the same line. A single strong alignment is taken; several (a run of
  identical lines) or none: the window doubles (up to `max_tail`) and is fetched again. At
  `max_tail` the earliest strong alignment is taken (nothing lost, some lines may repeat), or
  with none the whole window is new; both report `gap=True`. A wrong single strong alignment
  needs `min_overlap` varied lines to reappear verbatim: real engine logs never do that. A log of
  one line repeated more than `keep_lines` times reports a gap at every poll.
- The first poll yields its whole window (the starting point, no gap).

Window policy: the next poll asks for `2 x (most new lines of one container in the last 3 polls)
+ min_overlap`, at least the tail a grown poll needed in the last 3 polls, clamped to
[`min_tail`, `max_tail`]: quiet polls shrink it back. Memory: `keep_lines` lines per container.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orchestrator.hosts.parsers.compose_logs import LogLine, parse_compose_logs


@dataclass
class FollowBatch:
    new: list[LogLine]
    gap: bool
    tail: int = 0  # the window of the last fetch of this poll
    gap_containers: tuple[str, ...] = ()
    reset_containers: tuple[str, ...] = ()


@dataclass
class _Track:
    seen: deque[str]
    count: int = 0  # lines yielded for this container (its log position when `exact`)
    exact: bool = False  # followed from the container's first line


@dataclass
class _Decision:
    start: int
    kind: str  # "ok" | "grow" | "gap" | "reset"
    resolved_exactly: bool = False


class LogFollower:
    def __init__(self, fetch: Callable[[int], Awaitable[str]], *, initial_tail: int = 200, max_tail: int = 5000,
                 min_tail: int | None = None, min_overlap: int = 8, keep_lines: int = 512) -> None:
        if min_overlap < 1:
            raise ValueError("min_overlap must be >= 1")
        if not 1 <= initial_tail <= max_tail:
            raise ValueError("need 1 <= initial_tail <= max_tail")
        if keep_lines < min_overlap:
            raise ValueError("keep_lines must be >= min_overlap")
        self._fetch = fetch
        self.initial_tail = initial_tail
        self.max_tail = max_tail
        self.min_overlap = min_overlap
        self.keep_lines = keep_lines
        self.min_tail = min(max_tail, min_tail if min_tail is not None else max(2 * min_overlap, 16))
        self.tail = initial_tail
        self._tracks: dict[str, _Track] = {}
        self._polled = False
        #: (most new lines of one container, the tail a grown poll needed or 0) of the last polls
        self._history: deque[tuple[int, int]] = deque(maxlen=3)

    async def probe(self) -> bool:
        """Whether the log holds a line the next `poll()` would yield, for one line per container
        (`--tail 1`): a container's last line is not the last one read of it, or it was never read.
        A line repeated verbatim is not told apart (the next poll still yields it)."""
        lines = parse_compose_logs(await self._fetch(1))
        if not self._polled:
            return bool(lines)
        for line in lines:
            track = self._tracks.get(line.container)
            if track is None or not track.seen or track.seen[-1] != line.text:
                return True
        return False

    async def poll(self) -> FollowBatch:
        tail = self.tail
        while True:
            window = parse_compose_logs(await self._fetch(tail))
            groups: dict[str, list[str]] = {}
            for line in window:
                groups.setdefault(line.container, []).append(line.text)
            decisions = {name: self._locate(name, texts, complete=len(texts) < tail) for name, texts in groups.items()}
            if tail < self.max_tail and any(d.kind == "grow" for d in decisions.values()):
                tail = min(self.max_tail, tail * 2)
                continue
            break

        for decision in decisions.values():
            if decision.kind == "grow":  # at max_tail
                decision.kind = "gap"
        gap_containers = [name for name, d in decisions.items() if d.kind in ("gap", "reset")]
        reset_containers = [name for name, d in decisions.items() if d.kind == "reset"]

        new: list[LogLine] = []
        position: dict[str, int] = {}
        for line in window:
            index = position.get(line.container, 0)
            position[line.container] = index + 1
            if index >= decisions[line.container].start:
                new.append(line)

        most_new = 0
        for name, texts in groups.items():
            decision = decisions[name]
            fresh = texts[decision.start :]
            most_new = max(most_new, len(fresh))
            if name not in self._tracks:
                self._tracks[name] = _Track(deque(maxlen=self.keep_lines), exact=len(texts) < tail)
            track = self._tracks[name]
            if decision.kind == "ok":
                track.seen.extend(fresh)
                track.count += len(fresh)
                if decision.resolved_exactly:
                    track.exact = True
                    track.count = len(texts)
            else:
                track.seen.clear()
                track.seen.extend(texts)
                if decision.kind == "reset":
                    track.exact = True
                    track.count = len(texts)
                else:
                    track.exact = False
                    track.count += len(fresh)

        self._history.append((most_new, tail if tail > self.tail else 0))  # a window grown this poll
        self._polled = True
        self.tail = self._next_tail()
        return FollowBatch(new=new, gap=bool(gap_containers), tail=tail, gap_containers=tuple(gap_containers),
                           reset_containers=tuple(reset_containers))

    def _next_tail(self) -> int:
        recent_new = max(n for n, _ in self._history)
        grown = max(t for _, t in self._history)
        wanted = max(2 * recent_new + self.min_overlap, grown)
        return max(self.min_tail, min(self.max_tail, wanted))

    def _locate(self, name: str, window: list[str], *, complete: bool) -> _Decision:
        track = self._tracks.get(name)
        if track is None or track.count == 0:
            if not self._polled or complete:
                return _Decision(0, "ok", resolved_exactly=complete)
            return _Decision(0, "grow")
        seen = list(track.seen)
        count = track.count
        if complete and track.exact:
            if count <= len(window) and window[:count][-len(seen):] == seen:
                return _Decision(count, "ok")
            # rotation may have cut the log's start: one strong alignment means it rotated, not restarted
            strong = self._strong_alignments(window, seen, len(window))
            if len(strong) == 1:
                return _Decision(strong[0], "ok")
            return _Decision(0, "reset")
        upper = min(len(window), count) if track.exact else len(window)
        strong = self._strong_alignments(window, seen, upper)
        if len(strong) == 1:
            return _Decision(strong[0], "ok", resolved_exactly=complete)
        if complete:  # the whole log is in the window but our position in it is unknown
            return _Decision(min(strong), "gap") if strong else _Decision(0, "reset")
        return _Decision(min(strong, default=0), "grow")

    def _strong_alignments(self, window: list[str], seen: list[str], upper: int) -> list[int]:
        """Alignments p (1..upper) where window[:p] ends like `seen`, comparing enough varied lines."""
        if not seen:
            return []
        n_seen = len(seen)
        last = seen[-1]
        run = 1  # length of the trailing run of identical lines in `seen`
        while run < n_seen and seen[-run - 1] == last:
            run += 1
        need = max(min(n_seen, self.min_overlap), run + 1)
        if need > n_seen:
            return []
        out: list[int] = []
        for p in range(need, upper + 1):
            if window[p - 1] != last:
                continue
            c = min(p, n_seen)
            if window[p - c : p] == seen[n_seen - c :]:
                out.append(p)
        return out
