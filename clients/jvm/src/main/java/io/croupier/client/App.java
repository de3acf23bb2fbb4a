package io.croupier.client;

/**
 * A registered application; its heartbeats keep it and its shuffles alive. Thread-safe.
 */
public final class App implements AutoCloseable {
  App() {}

  /** The app id as registered. */
  public String id() {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * The string another process takes this app over with ({@link CroupierClient#attach}):
   * {@code croupier-app-v1:<app_id>:<key>}. A credential.
   */
  public String handle() {
    throw new UnsupportedOperationException("not yet");
  }

  /** Registers a new shuffle (safe to retry: the call carries a request id). */
  public Shuffle registerShuffle(int numMappers, int numPartitions) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Registers the shuffle {@code shuffleId}, or returns it when it exists with these sizes. */
  public Shuffle registerShuffle(long shuffleId, int numMappers, int numPartitions) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Opens one of this app's shuffles by id. */
  public Shuffle openShuffle(long shuffleId) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Opens a shuffle from its handle string. */
  public Shuffle openShuffle(String shuffleHandle) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Stops heartbeats and unregisters the app (workers delete its files). Idempotent. */
  public void unregister() {
    throw new UnsupportedOperationException("not yet");
  }

  /** Stops heartbeats without unregistering (the master expires the app later). */
  @Override
  public void close() {}
}
