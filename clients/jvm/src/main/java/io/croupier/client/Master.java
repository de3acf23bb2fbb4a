package io.croupier.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Logger;

/**
 * Calls to the master, wherever the leader is: the URLs ({@code tcp://a:p,tcp://b:p}) are tried
 * in turn, {@code NOT_LEADER} redirects are followed, and timeouts, {@code UNAVAILABLE} and
 * broken connections are retried with new request ids until the failover deadline. Every master
 * request a client sends is idempotent (REGISTER_APP with an id, REGISTER_SHUFFLE with a
 * request_id, and the rest by nature), so all are retried. Thread-safe.
 */
final class Master {
  private static final Logger LOG = Logger.getLogger(Master.class.getName());
  private static final long BACKOFF_MS = 200;

  private final Rpc rpc;
  private final List<String> urls = new ArrayList<>();
  private final ClientOptions options;
  private int current;

  Master(Rpc rpc, String masterUrls, ClientOptions options) {
    this.rpc = rpc;
    this.options = options;
    for (String u : masterUrls.split(",")) {
      if (!u.isBlank()) {
        io.croupier.zmtp.Endpoint.parse(u.trim());
        urls.add(u.trim());
      }
    }
    if (urls.isEmpty()) {
      throw new IllegalArgumentException("no master URL in " + masterUrls);
    }
  }

  /**
   * Sends one request (signed with {@code key} unless null or an open type) and returns the OK
   * reply's body.
   *
   * @throws CroupierException the master's refusal, or the last failure once the deadline passed
   */
  ObjectNode call(int msgType, ObjectNode body, byte[] key) {
    long giveUp = System.nanoTime() + options.failoverDeadline().toNanos();
    int attempts = 0;
    CroupierException last;
    while (true) {
      attempts++;
      String url = url();
      try {
        return rpc.call(url, Rpc.SMALL_PORT, msgType, body, key, options.requestTimeout()).body();
      } catch (IncompatibleServerException e) {
        throw e;
      } catch (CroupierException e) {
        last = e;
        if (e.code() == ErrorCode.NOT_LEADER) {
          follow(e.details().path("leader").asText(""));
        } else if (e.code() == ErrorCode.TIMEOUT || e.code() == ErrorCode.UNAVAILABLE) {
          if (e.code() == ErrorCode.TIMEOUT) {
            rpc.reconnect(url); // the lazy pirate: a new connection for the retry
          }
          next();
        } else {
          throw e;
        }
      }
      if (attempts > options.retries() && System.nanoTime() > giveUp) {
        LOG.warning("croupier: no master answered message type " + msgType + ": " + last.getMessage());
        throw last;
      }
      sleep(BACKOFF_MS);
    }
  }

  private synchronized String url() {
    return urls.get(current % urls.size());
  }

  private synchronized void next() {
    current++;
  }

  private synchronized void follow(String leader) {
    if (leader.isEmpty()) {
      current++;
      return;
    }
    if (!urls.contains(leader)) {
      urls.add(leader);
    }
    current = urls.indexOf(leader);
  }

  /** The URL tried first now. */
  String currentUrl() {
    return url();
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
