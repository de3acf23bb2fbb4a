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
 * pace: the interval the master's replies give ({@code heartbeat_interval} seconds, else a third
 * of {@code app_timeout}), else every 10 s, unless {@link ClientOptions#heartbeatInterval} fixes
 * it. It stops by itself when the master answers {@code UNKNOWN_APP} (the app expired).
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

  /** The pace a master reply asks for, else {@code fallback}. */
  private Duration pace(JsonNode reply, Duration fallback) {
    if (fixed != null) {
      return fixed;
    }
    double hb = reply == null ? 0 : reply.path("heartbeat_interval").asDouble(0);
    double timeout = reply == null ? 0 : reply.path("app_timeout").asDouble(0);
    if (hb > 0) {
      return Duration.ofMillis((long) (hb * 1000));
    }
    if (timeout > 0) {
      return Duration.ofMillis(Math.max(100, (long) (timeout * 1000 / 3)));
    }
    return fallback;
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
