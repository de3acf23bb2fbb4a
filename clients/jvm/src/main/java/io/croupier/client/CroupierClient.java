package io.croupier.client;

/**
 * A connection to a Croupier cluster (the master at a {@code tcp://host:port} URL, and the
 * workers it names). Thread-safe: one per JVM is enough; every writer and reader shares its
 * sockets. Close it when done (apps it registered stop heartbeating, they are not unregistered).
 *
 * <pre>{@code
 * try (CroupierClient c = CroupierClient.connect("tcp://127.0.0.1:9097", new ClientOptions())) {
 *   App app = c.registerApp(null, "etl");
 *   Shuffle sh = app.registerShuffle(4, 16);
 *   try (MapWriter w = sh.writer(0, 0)) { w.write(3, "one record".getBytes()); }
 * }
 * }</pre>
 */
public final class CroupierClient implements AutoCloseable {
  private final String masterUrl;
  private final ClientOptions options;

  private CroupierClient(String masterUrl, ClientOptions options) {
    this.masterUrl = masterUrl;
    this.options = options;
  }

  /**
   * A client of the master at {@code masterUrl} ({@code tcp://host:port}; several, comma
   * separated, for an HA ensemble). Checks that commons-codec's {@code Blake3} is on the class
   * path and that the master speaks ZMTP 3 NULL (a {@code --curve} cluster is refused here).
   *
   * @throws io.croupier.proto.CroupierException when the master cannot be reached or refuses
   */
  public static CroupierClient connect(String masterUrl, ClientOptions options) {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * Registers an app and starts its heartbeats (at the master's pace) in a daemon thread.
   *
   * @param appId the id to register ({@code null}: {@code name} plus a random suffix)
   * @param name the app's name (1..96 of {@code [A-Za-z0-9._-]})
   */
  public App registerApp(String appId, String name) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Takes over the app of {@code appHandle} ({@link App#handle()}), checked by one heartbeat. */
  public App attach(String appHandle) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Opens a shuffle from its {@link Shuffle#handle()} string (one {@code GET_SHUFFLE}). */
  public Shuffle openShuffle(String shuffleHandle) {
    throw new UnsupportedOperationException("not yet");
  }

  /** The master's {@code STATUS} reply, as JSON text (counts only, unless member-signed). */
  public String status() {
    throw new UnsupportedOperationException("not yet");
  }

  /** The options this client runs with. */
  public ClientOptions options() {
    return options;
  }

  /** The master URL. */
  public String masterUrl() {
    return masterUrl;
  }

  /** Stops heartbeats and closes every socket. Idempotent. */
  @Override
  public void close() {}
}
