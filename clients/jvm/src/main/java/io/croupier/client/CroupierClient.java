package io.croupier.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.Blake3s;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Handles;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.logging.Logger;

/**
 * A connection to a Croupier cluster (the master at a {@code tcp://host:port} URL, and the
 * workers it names). Thread-safe: one per JVM is enough; every writer and reader shares its
 * sockets. Close it when done (apps it registered stop heartbeating, they are not unregistered).
 *
 * <pre>{@code
 * try (CroupierClient c = CroupierClient.connect("tcp://127.0.0.1:9097", new ClientOptions())) {
 *   App app = c.registerApp(null, "etl");
 *   Shuffle sh = app.registerShuffle(4, 16);
 *   try (MapWriter w = sh.writer(0, 0)) {
 *     w.write(3, "one record".getBytes());
 *     w.commit();
 *   }
 * }
 * }</pre>
 */
public final class CroupierClient implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(CroupierClient.class.getName());
  private static final SecureRandom RANDOM = new SecureRandom();

  private final String masterUrl;
  private final ClientOptions options;
  private final Rpc rpc;
  private final Master master;
  private final EndCoalescer ends;
  private final List<App> apps = new ArrayList<>();
  private boolean closed;

  private CroupierClient(String masterUrl, ClientOptions options) {
    this.masterUrl = masterUrl;
    this.options = options;
    this.rpc = new Rpc(options.connectTimeout());
    this.master = new Master(rpc, masterUrl, options);
    this.ends = new EndCoalescer(master::call, options.mapperEndBatching());
  }

  /**
   * A client of the master at {@code masterUrl} ({@code tcp://host:port}; several, comma
   * separated, for an HA ensemble). Checks that commons-codec's {@code Blake3} is on the class
   * path, and that the master speaks ZMTP 3 NULL with one {@code PING}: a {@code --curve}
   * cluster is refused here with {@link IncompatibleServerException}, never a hang.
   *
   * @throws CroupierException when the master cannot be reached or refuses
   * @throws IllegalStateException when commons-codec's {@code Blake3} is missing
   */
  public static CroupierClient connect(String masterUrl, ClientOptions options) {
    Blake3s.requireAvailable();
    CroupierClient c = new CroupierClient(masterUrl, options == null ? new ClientOptions() : options);
    try {
      c.master.call(MsgType.PING, Json.object(), null);
    } catch (RuntimeException e) {
      c.close();
      throw e;
    }
    return c;
  }

  /**
   * Registers an app and starts its heartbeats (at the master's pace) in a daemon thread.
   *
   * @param appId the id to register ({@code null}: {@code name} plus a random suffix)
   * @param name the app's name (1..96 of {@code [A-Za-z0-9._-]})
   */
  public App registerApp(String appId, String name) {
    for (int tries = 0; ; tries++) {
      String id = appId != null ? appId : name.substring(0, Math.min(96, name.length())) + "-" + suffix();
      ObjectNode body = Json.object().put("name", name).put("app_id", id);
      if (options.tenantToken() != null) {
        body.put("tenant_token", options.tenantToken());
      }
      ObjectNode reply;
      try {
        reply = master.call(MsgType.REGISTER_APP, body, null);
      } catch (CroupierException e) {
        // an unsigned repeat of an id this very call registered (its reply was lost): new id, once
        boolean ours = id.equals(e.details().path("app_id").asText(null));
        if (e.code() == ErrorCode.UNAUTHORIZED && appId == null && ours && tries == 0) {
          LOG.warning("croupier: app " + id + " was registered but its key was lost; registering another id");
          continue;
        }
        throw e;
      }
      String keyHex = reply.path("app_key").asText(null);
      byte[] key = keyHex == null || keyHex.isEmpty() ? null : HexFormat.of().parseHex(keyHex);
      return adopt(new App(this, reply.path("app_id").asText(id), key, reply));
    }
  }

  private static String suffix() {
    byte[] b = new byte[5];
    RANDOM.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  /** Takes over the app of {@code appHandle} ({@link App#handle()}), checked by one heartbeat. */
  public App attach(String appHandle) {
    Handles.Parsed h = Handles.parseApp(appHandle);
    App app = new App(this, h.appId(), h.key(), null);
    app.heartbeat().beat();
    return adopt(app);
  }

  private App adopt(App app) {
    synchronized (this) {
      if (closed) {
        throw new CroupierException(ErrorCode.UNAVAILABLE, "the client is closed");
      }
      apps.add(app);
    }
    app.heartbeat().start();
    return app;
  }

  /** Opens a shuffle from its {@link Shuffle#handle()} string (one {@code GET_SHUFFLE}). */
  public Shuffle openShuffle(String shuffleHandle) {
    Handles.Parsed h = Handles.parseShuffle(shuffleHandle);
    return Shuffle.open(this, h.appId(), h.shuffleId(), h.key());
  }

  /** The master's {@code STATUS} reply, as JSON text (counts only, unless member-signed). */
  public String status() {
    return Json.text(master.call(MsgType.STATUS, Json.object(), null));
  }

  /** The options this client runs with. */
  public ClientOptions options() {
    return options;
  }

  /** The master URL. */
  public String masterUrl() {
    return masterUrl;
  }

  Master master() {
    return master;
  }

  /** Where this client's map tasks send their {@code MAPPER_END}s: together when concurrent. */
  EndCoalescer ends() {
    return ends;
  }

  /**
   * {@code MAPPER_END} and {@code MAPPER_END_BATCH} requests this client has sent: fewer than
   * its writers' commits when they end together (one request per round trip, not one each).
   */
  public long mapperEndRequests() {
    return ends.requests();
  }

  Rpc rpc() {
    return rpc;
  }

  synchronized void forget(App app) {
    apps.remove(app);
  }

  /** Stops heartbeats and closes every socket. Idempotent. */
  @Override
  public void close() {
    List<App> open;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      open = new ArrayList<>(apps);
      apps.clear();
    }
    for (App a : open) {
      a.close();
    }
    rpc.close();
  }
}
