"""Optimal pairing of expected with actual calls.

Repeated tool names make first-fit pairing wrong: `get_order(A), get_order(B)` against
`get_order(B), get_order(A)` pairs the first expected call with the first actual one, fails its
arguments, and reports two errors where there are none. We pair with the assignment that
maximises the total weight (the Hungarian algorithm, O(n^2 m)); with equal weights that is a
maximum bipartite matching.

A problem too large to solve exactly within a run's time limits (more than `EXACT_WORK_LIMIT`
steps: hundreds of expected calls against thousands of calls of the same tool) is paired
greedily instead, each row in order taking its best free column (O(n m)); callers say so in
their details (`fits_exactly`).
"""

from __future__ import annotations

from collections.abc import Sequence

Weights = Sequence[Sequence[float | None]]


# Steps of the exact algorithm (min(n, m)^2 * max(n, m)) above which the pairing is greedy.
EXACT_WORK_LIMIT = 20_000_000


def fits_exactly(rows: int, cols: int) -> bool:
    """Whether `max_weight_matching` pairs a rows x cols problem exactly (else greedily)."""
    small, large = sorted((rows, cols))
    return small * small * large <= EXACT_WORK_LIMIT


def max_weight_matching(weights: Weights) -> list[tuple[int, int]]:
    """Pairs (row, column) maximising the sum of `weights[row][column]`; `None` marks a pair
    that is not allowed. Weights should be positive (a zero-weight pair may be left out).
    Rows and columns are each used at most once; the result is sorted by row."""
    rows = len(weights)
    cols = len(weights[0]) if rows else 0
    if not rows or not cols:
        return []
    if rows == 1 or cols == 1:  # one side of one: the best single pair is optimal
        best: tuple[float, int, int] | None = None
        for r in range(rows):
            for c in range(cols):
                w = weights[r][c]
                if w is not None and (best is None or w > best[0]):
                    best = (w, r, c)
        return [] if best is None else [(best[1], best[2])]
    if not fits_exactly(rows, cols):
        return _greedy(weights)
    allowed = [w for row in weights for w in row if w is not None]
    if not allowed:
        return []
    top = max(allowed)
    transposed = rows > cols  # the algorithm below assigns every row: rows <= columns
    n, m = (cols, rows) if transposed else (rows, cols)
    cost = [
        [
            top + 1.0 - w if w is not None else top + 1.0
            for w in ((weights[j][i] for j in range(rows)) if transposed else weights[i])
        ]
        for i in range(n)
    ]
    assignment = _hungarian(cost, n, m)
    pairs = []
    for i, j in enumerate(assignment):
        r, c = (j, i) if transposed else (i, j)
        if weights[r][c] is not None:
            pairs.append((r, c))
    pairs.sort()
    return pairs


def _hungarian(cost: list[list[float]], n: int, m: int) -> list[int]:
    """Minimum-cost assignment of each of n rows to a distinct one of m >= n columns
    (potentials method). Returns the column of each row."""
    inf = float("inf")
    u = [0.0] * (n + 1)
    v = [0.0] * (m + 1)
    owner = [0] * (m + 1)  # owner[j]: row (1-based) assigned to column j, 0 = free
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = [inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = owner[j0]
            delta = inf
            j1 = 0
            row = cost[i0 - 1]
            ui0 = u[i0]
            for j in range(1, m + 1):
                if not used[j]:
                    cur = row[j - 1] - ui0 - v[j]
                    if cur < minv[j]:
                        minv[j] = cur
                        way[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(m + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    assignment = [0] * n
    for j in range(1, m + 1):
        if owner[j]:
            assignment[owner[j] - 1] = j - 1
    return assignment


def _greedy(weights: Weights) -> list[tuple[int, int]]:
    """Each row in order takes the free column of highest weight (the earliest of equals)."""
    taken: set[int] = set()
    pairs = []
    for r, row in enumerate(weights):
        best: tuple[float, int] | None = None
        for c, w in enumerate(row):
            if w is not None and c not in taken and (best is None or w > best[0]):
                best = (w, c)
        if best is not None:
            taken.add(best[1])
            pairs.append((r, best[1]))
    return pairs
