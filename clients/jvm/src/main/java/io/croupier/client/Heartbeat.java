package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.time.Duration;
import java.util.logging.Logger;

/**
 * A daemon thread that sends {@code APP_HEARTBEAT} for one app until stopped, at the master's
 * pace: every 10 s at most, and at most a third of the {@code app_timeout} its replies to
 * {@code REGISTER_APP} and {@code APP_HEARTBEAT} say (a new leader may say another), unless
 * {@link ClientOptions#heartbeatInterval} fixes it. It stops by itself when the master answers
 * {@code UNKNOWN_APP} (the app expired).
 */
final class Heartbeat implements Runnable {
  private static final Logger LOG = Logger.getLogger(Heartbeat.class.getName());
  private static final Duration DEFAULT = Duration.ofSeconds(10);

  private final Master master;
  private final String appId;
  private final byte[] key;
  private final Duration fixed;
  private volatile Duration interval;
  private volatile boolean stopped;
  private volatile long beats;
  private Thread thread;

  Heartbeat(Master master, String appId, byte[] key, Duration fixed, JsonNode registration) {
    this.master = master;
    this.appId = appId;
    this.key = key;
    this.fixed = fixed;
    this.interval = pace(registration, DEFAULT);
  }

  /**
   * The pace for a master reply: every 10 s at most, and at most a third of the {@code
   * app_timeout} it says (PROTOCOL §4, Heartbeat intervals); a reply without it keeps {@code
   * current}. A fixed interval is kept, with a warning when it is more than a third.
   */
  private Duration pace(JsonNode reply, Duration current) {
    double timeout = reply == null ? 0 : reply.path("app_timeout").asDouble(0);
    if (fixed != null) {
      if (timeout > 0 && fixed.toMillis() > timeout * 1000 / 3) {
        LOG.warning("croupier: app " + appId + " heartbeats every " + fixed.toMillis() + " ms, more than a third"
            + " of the master's app_timeout of " + timeout + " s");
      }
      return fixed;
    }
    if (timeout > 0) {
      return Duration.ofMillis(Math.max(50, Math.min(DEFAULT.toMillis(), (long) (timeout * 1000 / 3))));
    }
    return current;
  }

  /** Starts the thread. */
  synchronized void start() {
    thread = new Thread(this, "croupier-heartbeat-" + appId);
    thread.setDaemon(true);
    thread.start();
  }

  /** One heartbeat now (and adopt the reply's pace). */
  void beat() {
    JsonNode reply = master.call(MsgType.APP_HEARTBEAT, Json.object().put("app_id", appId), key);
    interval = pace(reply, interval);
    beats++;
  }

  @Override
  public void run() {
    while (true) {
      synchronized (this) {
        long until = System.nanoTime() + interval.toNanos();
        while (!stopped && System.nanoTime() < until) {
          try {
            wait(Math.max(1, (until - System.nanoTime()) / 1_000_000));
          } catch (InterruptedException e) {
            return;
          }
        }
        if (stopped) {
          return;
        }
      }
      try {
        beat();
      } catch (CroupierException e) {
        if (e.code() == ErrorCode.UNKNOWN_APP) {
          LOG.severe("croupier: app " + appId + " is no longer registered (expired?); heartbeats stop");
          return;
        }
        LOG.warning("croupier: heartbeat of app " + appId + " failed: " + e.getMessage());
      } catch (RuntimeException e) {
        LOG.warning("croupier: heartbeat of app " + appId + " failed: " + e);
      }
    }
  }

  /** Heartbeats acknowledged so far. */
  long beats() {
    return beats;
  }

  /** The current interval. */
  Duration interval() {
    return interval;
  }

  /** Stops the thread and waits for it. Idempotent. */
  void stop() {
    Thread t;
    synchronized (this) {
      stopped = true;
      t = thread;
      thread = null;
      notifyAll();
    }
    if (t != null && t != Thread.currentThread()) {
      try {
        t.join(1000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
