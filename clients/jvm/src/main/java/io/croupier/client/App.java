package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Handles;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.security.SecureRandom;
import java.util.HexFormat;

/**
 * A registered application; its heartbeats keep it and its shuffles alive. Thread-safe.
 */
public final class App implements AutoCloseable {
  private static final SecureRandom RANDOM = new SecureRandom();

  private final CroupierClient client;
  private final String appId;
  private final byte[] key;
  private final Heartbeat heartbeat;

  App(CroupierClient client, String appId, byte[] key, JsonNode registration) {
    this.client = client;
    this.appId = appId;
    this.key = key;
    this.heartbeat = new Heartbeat(client.master(), appId, key, client.options().heartbeatInterval(), registration);
  }

  /** The app id as registered. */
  public String id() {
    return appId;
  }

  /**
   * The string another process takes this app over with ({@link CroupierClient#attach}):
   * {@code croupier-app-v1:<app_id>:<key>}. A credential: never log it.
   */
  public String handle() {
    return Handles.app(appId, key);
  }

  /** Registers a new shuffle (safe to retry: the call carries a request id). */
  public Shuffle registerShuffle(int numMappers, int numPartitions) {
    return register(null, numMappers, numPartitions);
  }

  /** Registers the shuffle {@code shuffleId}, or returns it when it exists with these sizes. */
  public Shuffle registerShuffle(long shuffleId, int numMappers, int numPartitions) {
    return register(shuffleId, numMappers, numPartitions);
  }

  private Shuffle register(Long shuffleId, int numMappers, int numPartitions) {
    byte[] rid = new byte[12];
    RANDOM.nextBytes(rid);
    ObjectNode body = Json.object().put("app_id", appId).put("num_mappers", numMappers)
        .put("num_partitions", numPartitions).put("replicate", true);
    if (shuffleId != null) {
      body.put("shuffle_id", shuffleId);
    }
    body.put("request_id", HexFormat.of().formatHex(rid));
    ObjectNode summary = client.master().call(MsgType.REGISTER_SHUFFLE, body, key);
    return new Shuffle(client, summary, key);
  }

  /** Opens one of this app's shuffles by id. */
  public Shuffle openShuffle(long shuffleId) {
    return Shuffle.open(client, appId, shuffleId, key);
  }

  /** Opens a shuffle from its handle string. */
  public Shuffle openShuffle(String shuffleHandle) {
    return client.openShuffle(shuffleHandle);
  }

  /** Heartbeats the master acknowledged so far. */
  public long heartbeats() {
    return heartbeat.beats();
  }

  /** How often this app heartbeats now (the master's pace, or the fixed interval). */
  public java.time.Duration heartbeatInterval() {
    return heartbeat.interval();
  }

  Heartbeat heartbeat() {
    return heartbeat;
  }

  /** Stops heartbeats and unregisters the app (workers delete its files). Idempotent. */
  public void unregister() {
    close();
    try {
      client.master().call(MsgType.UNREGISTER_APP, Json.object().put("app_id", appId), key);
    } catch (CroupierException e) {
      if (e.code() != ErrorCode.UNKNOWN_APP) {
        throw e;
      }
    }
  }

  /** Stops heartbeats without unregistering (the master expires the app later). */
  @Override
  public void close() {
    heartbeat.stop();
    client.forget(this);
  }
}
