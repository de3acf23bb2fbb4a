package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.util.Collection;

/**
 * {@code REVIVE_PARTITION} (PROTOCOL §4): a partition's next location after a failed push or a
 * split. {@code NOT_ENOUGH_WORKERS} is retried first without the blamed workers (blame is a
 * guess), then with a back-off until the request timeout.
 */
final class Reviver {
  private final Shuffle shuffle;

  Reviver(Shuffle shuffle) {
    this.shuffle = shuffle;
  }

  /** The newest location of {@code partition} past {@code epoch}; recorded in the routing. */
  Location revive(int partition, int epoch, String reason, Collection<String> failedWorkers) {
    ObjectNode body = shuffle.body().put("partition", partition).put("epoch", epoch)
        .put("reason", reason.length() > 200 ? reason.substring(0, 200) : reason);
    ArrayNode failed = body.putArray("failed_workers");
    failedWorkers.forEach(failed::add);
    long deadline = System.nanoTime() + shuffle.client().options().requestTimeout().toNanos();
    long pause = 50;
    while (true) {
      try {
        JsonNode reply = shuffle.master(MsgType.REVIVE_PARTITION, body);
        JsonNode locs = reply.path("locations");
        Location loc = Location.parse(locs.get(locs.size() - 1));
        return shuffle.routing().update(partition, loc);
      } catch (CroupierException e) {
        if (e.code() != ErrorCode.NOT_ENOUGH_WORKERS) {
          throw e;
        }
        if (!body.path("failed_workers").isEmpty()) {
          body.putArray("failed_workers");
          continue;
        }
        if (System.nanoTime() > deadline) {
          throw e;
        }
        sleep(pause);
        pause = Math.min(1000, pause * 2);
      }
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new CroupierException(ErrorCode.UNAVAILABLE, "interrupted", e);
    }
  }
}
