package io.croupier.proto;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The {@code winner_runs} of a locations reply (PROTOCOL §4): sorted, disjoint runs {@code [lo,
 * hi, attempt]} saying that maps lo..hi-1 ended and won with {@code attempt}. Looked up with a
 * binary search on {@code lo}; never expanded.
 */
public final class WinnerRuns {
  private final int[] lo;
  private final int[] hi;
  private final int[] attempt;

  private WinnerRuns(int[] lo, int[] hi, int[] attempt) {
    this.lo = lo;
    this.hi = hi;
    this.attempt = attempt;
  }

  /** Parses the JSON array (BAD shapes are INTERNAL: the master sent them). */
  public static WinnerRuns parse(JsonNode runs) {
    if (runs == null || !runs.isArray()) {
      throw new CroupierException(ErrorCode.INTERNAL, "a locations reply without winner_runs");
    }
    int n = runs.size();
    int[] lo = new int[n];
    int[] hi = new int[n];
    int[] at = new int[n];
    for (int i = 0; i < n; i++) {
      JsonNode r = runs.get(i);
      lo[i] = r.path(0).asInt();
      hi[i] = r.path(1).asInt();
      at[i] = r.path(2).asInt();
      if (r.size() != 3 || lo[i] >= hi[i] || (i > 0 && lo[i] < hi[i - 1])) {
        throw new CroupierException(ErrorCode.INTERNAL, "malformed winner_runs at index " + i);
      }
    }
    return new WinnerRuns(lo, hi, at);
  }

  /** The winning attempt of {@code map}, or -1 when it has not ended. */
  public int winner(int map) {
    int a = 0;
    int b = lo.length - 1;
    while (a <= b) {
      int mid = (a + b) >>> 1;
      if (lo[mid] <= map) {
        a = mid + 1;
      } else {
        b = mid - 1;
      }
    }
    return b >= 0 && map < hi[b] ? attempt[b] : -1;
  }

  /** The number of runs. */
  public int size() {
    return lo.length;
  }

  /** Run {@code i} as {@code [lo, hi, attempt]}. */
  public int[] run(int i) {
    return new int[] {lo[i], hi[i], attempt[i]};
  }
}
