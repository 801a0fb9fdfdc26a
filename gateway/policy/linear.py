"""An online linear model: least squares over a sliding window of the latest observations.

Each observation is a feature vector `x` (its first entry 1, the intercept) and a value `y`.
The model keeps the sums XᵀX and Xᵀy of the window, adds the newest and subtracts the oldest,
and solves (XᵀX + ridge) w = Xᵀy when asked for a prediction, at most once every `REFRESH`
observations (a 3x3 or 5x5 system). The ridge keeps the solve stable when a feature stays constant
(a replica whose batch is always full): the fit then explains the level with the intercept,
and predictions at the values it has seen stay right. The sums are rebuilt from the window
every `window` observations, so rounding does not accumulate.

What it misses, by construction: effects that are not linear in the features (a batch that
crosses a KV-cache limit and preempts; chunked prefill splitting a long prompt over steps), and
changes faster than the window (a replica that just took a burst predicts from before it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

RIDGE = 1e-6
# A fit is refreshed after this many new observations (a solve costs ~20 µs: one per request
# would be most of a placement's cost), or when a prediction finds none yet.
REFRESH = 8


class OnlineLinear:
    __slots__ = ("_dirty", "_n", "_since_rebuild", "_w", "_window", "_xtx", "_xty", "samples")

    def __init__(self, n: int, window: int = 128) -> None:
        if n < 1 or window < n:
            raise ValueError("an online model needs 1+ features and a window of at least that")
        self._n = n
        self._window = window
        self.samples: deque[tuple[tuple[float, ...], float]] = deque()
        self._xtx = [[0.0] * n for _ in range(n)]
        self._xty = [0.0] * n
        self._w: list[float] | None = None
        self._dirty = 0  # observations since the last fit
        self._since_rebuild = 0

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def ready(self) -> bool:
        """Enough observations to predict from (twice the features)."""
        return len(self.samples) >= 2 * self._n

    def observe(self, x: Sequence[float], y: float) -> None:
        if len(x) != self._n:
            raise ValueError(f"expected {self._n} features, got {len(x)}")
        if not (y == y and abs(y) < 1e12):  # NaN or absurd: not learned from
            return
        xs = tuple(float(v) for v in x)
        self.samples.append((xs, y))
        self._add(xs, y, 1.0)
        if len(self.samples) > self._window:
            old, oy = self.samples.popleft()
            self._add(old, oy, -1.0)
        self._since_rebuild += 1
        if self._since_rebuild >= self._window:
            self._rebuild()
        self._dirty += 1

    def _add(self, x: tuple[float, ...], y: float, sign: float) -> None:
        n, xtx, xty = self._n, self._xtx, self._xty
        for i in range(n):
            xi = sign * x[i]
            row = xtx[i]
            for j in range(n):
                row[j] += xi * x[j]
            xty[i] += xi * y

    def _rebuild(self) -> None:
        n = self._n
        self._xtx = [[0.0] * n for _ in range(n)]
        self._xty = [0.0] * n
        for x, y in self.samples:
            self._add(x, y, 1.0)
        self._since_rebuild = 0

    def weights(self) -> list[float] | None:
        """The fitted coefficients (None before `ready`)."""
        if not self.ready:
            return None
        if self._w is None or self._dirty >= REFRESH:
            self._w = _solve(self._xtx, self._xty)
            self._dirty = 0
        return self._w

    def predict(self, x: Sequence[float]) -> float | None:
        """The predicted value at `x` (never below 0: these are durations); None before
        `ready`."""
        w = self.weights()
        if w is None:
            return None
        y = 0.0
        for wi, xi in zip(w, x, strict=True):
            y += wi * xi
        return y if y > 0.0 else 0.0


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """(a + ridge·diag(a)) w = b by Gaussian elimination with partial pivoting (the ridge is
    relative to each feature's own scale, so features in seconds and in thousands of tokens
    are damped alike)."""
    n = len(b)
    m = [[*a[i], b[i]] for i in range(n)]
    for i in range(n):
        m[i][i] += RIDGE * a[i][i] + 1e-12
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        p = m[col][col]
        if p == 0.0:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / p
            if f:
                row, top = m[r], m[col]
                for k in range(col, n + 1):
                    row[k] -= f * top[k]
    w = [0.0] * n
    for i in range(n - 1, -1, -1):
        s = m[i][n] - sum(m[i][k] * w[k] for k in range(i + 1, n))
        w[i] = s / m[i][i] if m[i][i] else 0.0
    return w
