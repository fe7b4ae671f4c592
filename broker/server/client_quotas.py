"""Client quotas as Kafka's (KIP-13, KIP-55, KIP-124): a byte rate for producers and for consumers and a share of
the broker's request-handling time, per user, client id or both, with defaults.

Which quota applies to a request is decided here (``QuotaManager.quota_for``), by Kafka's precedence:
/config/users/<user>/clients/<client-id>, /config/users/<user>/clients/<default>, /config/users/<user>,
/config/users/<default>/clients/<client-id>, /config/users/<default>/clients/<default>, /config/users/<default>,
/config/clients/<client-id>, /config/clients/<default>; the first that sets the quota's key wins. Clients that
match one entry share its rate when the entry names them (a user's quota: all its clients together); a default
entry gives each user or client id a rate of its own, as Kafka's metric tags do.

The rate is measured in windows (quota.window.num = 11 of quota.window.size.seconds = 1), and a client over its
quota is throttled for (observed - quota) / quota * window span: the time it takes for its excess to drain at
its quota. What the connection then does (the answer's throttle_time_ms and a muted channel) is
channel_throttle.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from ferry.zk.client_quotas import DEFAULT, QuotaEntity

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
MUTATION = "controller_mutation_rate"  # KIP-599: partitions created or deleted per second
NUM_WINDOWS = 11  # quota.window.num
WINDOW_S = 1.0  # quota.window.size.seconds

PURGE_EVERY_S = 60.0  # idle rates and cached lookups are dropped this often (client ids come and go)

SensorKey = tuple[str, str]  # (user, client id) as the matched entry names them; "" where it does not


class WindowedRate:
    """A rate over the last ``num`` windows of ``size`` seconds (Kafka's SampledStat and Rate). The span is counted
    from the oldest live window and never shorter than one window (Kafka pads it to num - 1 windows: a greedy
    client then bursts num - 1 windows' worth each time its burst ages out, a sawtooth that breaks the 10%)."""

    __slots__ = ("_num", "_size", "_starts", "_values")

    def __init__(self, num: int = NUM_WINDOWS, size: float = WINDOW_S) -> None:
        self._num = num
        self._size = size
        self._starts = [-num - 1] * num  # the window index each slot holds
        self._values = [0.0] * num

    def record(self, value: float, now: float) -> None:
        idx = int(now // self._size)
        slot = idx % self._num
        if self._starts[slot] != idx:
            self._starts[slot] = idx
            self._values[slot] = 0.0
        self._values[slot] += value

    def measure(self, now: float) -> tuple[float, float]:
        """(total in the live windows, the span they cover in seconds)."""
        idx = int(now // self._size)
        total = 0.0
        oldest = idx
        for start, value in zip(self._starts, self._values, strict=True):
            if idx - start < self._num:
                total += value
                if start < oldest:
                    oldest = start
        span = max(now - oldest * self._size, self._size)
        return total, span

    def throttle_s(self, quota: float, now: float) -> float:
        """Seconds to hold the client so its rate comes back to ``quota``; 0 when within it."""
        total, span = self.measure(now)
        rate = total / span
        if rate <= quota:
            return 0.0
        return min((rate - quota) / quota * span, self._num * self._size)


_ORDER = (  # (user part, client part) of each level, most specific first; None: that component is absent
    ("user", "client"), ("user", DEFAULT), ("user", None),
    (DEFAULT, "client"), (DEFAULT, DEFAULT), (DEFAULT, None),
    (None, "client"), (None, DEFAULT),
)


class QuotaManager:
    """One kind of quota (a byte rate or the request share): which entry applies to a client, and its rate."""

    def __init__(self, key: str, num: int = NUM_WINDOWS, size: float = WINDOW_S) -> None:
        self.key = key
        self._num, self._size = num, size
        self._levels: dict[QuotaEntity, float] = {}
        self._resolved: dict[tuple[str, str], tuple[float, SensorKey] | None] = {}
        self._rates: dict[SensorKey, WindowedRate] = {}
        self._purged_at = 0.0

    def update(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        """Take a new copy of the stored quotas (from the ZooKeeper watcher's thread: one swap, no lock)."""
        levels = {e: q[self.key] for e, q in quotas.items() if self.key in q}
        self._levels, self._resolved = levels, {}

    @property
    def configured(self) -> bool:
        return bool(self._levels)

    def measured(self) -> list[SensorKey]:
        """The (user, client id) keys a rate is kept for (Kafka's quota sensors)."""
        return list(self._rates)

    def quota_for(self, user: str, client_id: str) -> tuple[float, SensorKey] | None:
        """(quota, the key of the rate it is measured on) for a client, or None: no quota applies."""
        resolved = self._resolved
        found = resolved.get((user, client_id), False)
        if found is not False:
            return found  # type: ignore[return-value]
        levels = self._levels
        found = None
        for u, c in _ORDER:
            entity = QuotaEntity(user if u == "user" else u, client_id if c == "client" else c)
            quota = levels.get(entity)
            if quota is not None:
                found = (quota, (user if u is not None else "", client_id if c is not None else ""))
                break
        resolved[(user, client_id)] = found
        return found

    def record(self, user: str, client_id: str, value: float, now: float) -> float:
        """Count ``value`` against the client's quota; the seconds it is to be throttled (0: none applies)."""
        found = self.quota_for(user, client_id)
        if found is None:
            return 0.0
        quota, sensor = found
        if now - self._purged_at > PURGE_EVERY_S:
            self._purge(now)
        rate = self._rates.get(sensor)
        if rate is None:
            rate = self._rates[sensor] = WindowedRate(self._num, self._size)
        rate.record(value, now)
        return rate.throttle_s(quota, now)

    def _purge(self, now: float) -> None:
        """Forget the rates with nothing in their windows and the cached lookups (rebuilt on the next request)."""
        self._purged_at = now
        self._rates = {k: r for k, r in self._rates.items() if r.measure(now)[0] > 0}
        self._resolved = {}


class ClientQuotas:
    """The broker's four quota managers; ``active`` is False while no quota is configured at all (then a
    connection does nothing per request for quotas). ``mutations``: the partitions a topic-changing request
    (its frame) creates or deletes, for controller_mutation_rate (set by the broker: it needs the metadata)."""

    def __init__(self, num: int = NUM_WINDOWS, size: float = WINDOW_S,
                 mutations: Callable[[bytes | bytearray], int] = lambda _frame: 0) -> None:
        self.produce = QuotaManager(PRODUCE, num, size)
        self.fetch = QuotaManager(FETCH, num, size)
        self.request = QuotaManager(REQUEST, num, size)
        self.mutation = QuotaManager(MUTATION, num, size)
        self.mutations = mutations
        self.active = False

    def update(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        managers = (self.produce, self.fetch, self.request, self.mutation)
        for manager in managers:
            manager.update(quotas)
        self.active = any(m.configured for m in managers)
