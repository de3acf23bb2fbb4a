package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.CroupierException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * Soft splits (PROTOCOL §5.2): a PUSH's OK reply names locations past the worker's split
 * threshold; each is revived on a background thread (one per writer), while batches keep going
 * to the old epoch until the new location comes. A failed soft revive is only logged: the old
 * location still takes data, and its next reply asks again.
 */
final class SoftSplits {
  private static final Logger LOG = Logger.getLogger(SoftSplits.class.getName());

  private final Shuffle shuffle;
  private final Reviver reviver;
  private final Map<Integer, Future<?>> running = new HashMap<>();
  private ExecutorService pool;

  SoftSplits(Shuffle shuffle, Reviver reviver) {
    this.shuffle = shuffle;
    this.reviver = reviver;
  }

  /** Handles a reply's {@code soft_split} field (absent or empty: nothing to do). */
  void offer(JsonNode split, String worker) {
    if (!split.isArray()) {
      return;
    }
    for (JsonNode item : split) {
      if (!(item.isArray() && item.size() == 2 && item.get(0).isInt() && item.get(1).isInt())) {
        continue;
      }
      int p = item.get(0).asInt();
      int epoch = item.get(1).asInt();
      Future<?> f = running.get(p);
      if ((f != null && !f.isDone()) || shuffle.routing().current(p).epoch() > epoch) {
        continue;
      }
      if (pool == null) {
        pool = Executors.newSingleThreadExecutor(r -> {
          Thread t = new Thread(r, "croupier-soft-split");
          t.setDaemon(true);
          return t;
        });
      }
      String reason = "SOFT_SPLIT: " + worker + " holds its threshold of partition " + p + " epoch " + epoch;
      running.put(p, pool.submit(() -> revive(p, epoch, reason)));
    }
  }

  private void revive(int p, int epoch, String reason) {
    try {
      reviver.revive(p, epoch, reason, List.of());
    } catch (CroupierException e) {
      LOG.warning("croupier: soft split of partition " + p + " epoch " + epoch + " failed: " + e.getMessage());
    }
  }

  /** Waits for the revives still running and ends the thread. */
  void finish() {
    if (pool != null) {
      pool.shutdown();
      try {
        pool.awaitTermination(shuffle.client().options().requestTimeout().toMillis() * 2, TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      pool = null;
    }
    running.clear();
  }
}
