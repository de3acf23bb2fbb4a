package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.PartitionBitmap;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.logging.Logger;

/**
 * Writes the batches of one map attempt. Not thread-safe: one task thread uses it.
 *
 * <p>{@link #commit()} seals every touched partition, waits for every acknowledgement, then
 * sends {@code MAPPER_END}; the first attempt of a map to get there wins. A losing attempt is not
 * an error. {@link #close()} without a commit aborts, so that try-with-resources never ends an
 * attempt that failed:
 *
 * <pre>{@code
 * try (MapWriter w = shuffle.writer(mapId, attemptId)) {
 *   w.write(3, record);
 *   boolean won = w.commit();
 * }
 * }</pre>
 *
 * <p>An attempt is <em>superseded</em> when its pushes are refused because another attempt won
 * and the shuffle is done (a revive answered {@code CONFLICT}, after {@code STALE_LOCATION}):
 * later writes are dropped and {@code commit()} returns false.
 */
public final class MapWriter implements AutoCloseable {
  private static final Logger LOG = Logger.getLogger(MapWriter.class.getName());

  private enum State { OPEN, COMMITTED, ABORTED, SUPERSEDED }

  private final Shuffle shuffle;
  private final int mapId;
  private final int attemptId;
  private final RecordBuffers records;
  private final Pusher pusher;
  private final int[] nextBatch;
  private final long[] bytes;
  private final BitSet touched = new BitSet();
  private State state = State.OPEN;
  private boolean won;
  private int winner = -1;

  MapWriter(Shuffle shuffle, int mapId, int attemptId) {
    this.shuffle = shuffle;
    this.mapId = mapId;
    this.attemptId = attemptId;
    ClientOptions o = shuffle.client().options();
    this.records = new RecordBuffers(shuffle.numPartitions(), o.pushBufferSize(), o.writerMemoryLimit());
    this.pusher = new Pusher(shuffle);
    this.nextBatch = new int[shuffle.numPartitions()];
    this.bytes = new long[shuffle.numPartitions()];
  }

  /**
   * Pushes one opaque batch (already serialized and compressed by the caller) to {@code
   * partition}: a reader gets exactly these bytes back as one {@link Batch}. The bytes are
   * copied. Blocks only while the worker's in-flight window is full. Handles replication acks,
   * CONGESTED back-off, revives (same batch ids) and soft/hard splits.
   *
   * @throws CroupierException a push failed for good (the writer is then aborted)
   */
  public void pushBatch(int partition, byte[] data, int off, int len) {
    if (!open(partition)) {
      return;
    }
    byte[] copy = new byte[len];
    System.arraycopy(data, off, copy, 0, len);
    submit(List.of(batch(partition, copy, 0, len)));
  }

  /**
   * {@link #pushBatch(int, byte[], int, int)} of the whole array, handed over without a copy:
   * the caller must not change {@code data} afterwards (it may be resent after a revive).
   */
  public void pushBatch(int partition, byte[] data) {
    if (open(partition)) {
      submit(List.of(batch(partition, data, 0, data.length)));
    }
  }

  /**
   * Adds one record to {@code partition}, framed as the Python SDK frames records (u32 LE
   * length + bytes); records are packed into batches of about {@code pushBufferSize} bytes.
   *
   * @throws CroupierException a push failed for good (the writer is then aborted)
   */
  public void write(int partition, byte[] record) {
    if (!open(partition)) {
      return;
    }
    List<RecordBuffers.Full> full = records.add(partition, record);
    if (!full.isEmpty()) {
      submit(batches(full));
    }
  }

  private boolean open(int partition) {
    if (state == State.SUPERSEDED) {
      return false;
    }
    if (state != State.OPEN) {
      throw new IllegalStateException("writer of map " + mapId + " attempt " + attemptId + " is " + state);
    }
    if (partition < 0 || partition >= nextBatch.length) {
      throw new IllegalArgumentException("partition " + partition + " is out of range 0.." + (nextBatch.length - 1));
    }
    return true;
  }

  private List<OutBatch> batches(List<RecordBuffers.Full> full) {
    List<OutBatch> out = new ArrayList<>(full.size());
    for (RecordBuffers.Full f : full) {
      out.add(batch(f.partition(), f.data(), 0, f.data().length));
    }
    return out;
  }

  private OutBatch batch(int partition, byte[] data, int off, int len) {
    touched.set(partition);
    bytes[partition] += len;
    return OutBatch.of(shuffle.key(), partition, mapId, attemptId, nextBatch[partition]++, data, off, len);
  }

  private void submit(List<OutBatch> batches) {
    try {
      pusher.submit(batches);
    } catch (CroupierException e) {
      if (e.code() == ErrorCode.CONFLICT && superseded()) {
        return;
      }
      abort();
      throw e;
    } catch (RuntimeException e) {
      abort();
      throw e;
    }
  }

  /** Data bytes pushed so far per partition (batch headers not counted). */
  public long[] bytesPerPartition() {
    return bytes.clone();
  }

  /**
   * Flushes, seals every touched partition, waits for every ack and sends {@code MAPPER_END}.
   * Returns whether this attempt won; a losing attempt ({@code won:false}, or {@code
   * STALE_LOCATION} because the shuffle committed) returns false and is not an error.
   * Idempotent once committed.
   *
   * @throws CroupierException a push or {@code MAPPER_END} failed (the writer is then aborted)
   */
  public boolean commit() {
    if (state == State.COMMITTED || state == State.SUPERSEDED) {
      return won;
    }
    if (state == State.ABORTED) {
      throw new IllegalStateException("writer of map " + mapId + " attempt " + attemptId + " was aborted");
    }
    try {
      submit(batches(records.flushAll()));
      if (state == State.SUPERSEDED) {
        return false;
      }
      List<OutBatch> seals = new ArrayList<>();
      for (int p = touched.nextSetBit(0); p >= 0; p = touched.nextSetBit(p + 1)) {
        seals.add(OutBatch.seal(shuffle.key(), p, mapId, attemptId, nextBatch[p]));
      }
      pusher.submit(seals);
      pusher.drain();
      JsonNode reply = mapperEnd();
      state = State.COMMITTED;
      won = reply.path("won").asBoolean();
      winner = reply.path("winner").asInt(-1);
      return won;
    } catch (CroupierException e) {
      if (e.code() == ErrorCode.CONFLICT && state == State.OPEN && superseded()) {
        return false;
      }
      abort();
      throw e;
    }
  }

  private JsonNode mapperEnd() {
    // concurrent tasks of this client end in one MAPPER_END_BATCH (EndCoalescer)
    return shuffle.client().ends().end(new EndCoalescer.End(shuffle.appId(), shuffle.id(), shuffle.key(), mapId,
        attemptId, touched.cardinality(), PartitionBitmap.encode(touched, shuffle.numPartitions())));
  }

  /**
   * After a {@code CONFLICT} (a revive refused): did another attempt win a finished shuffle? Only
   * when every map has ended is {@code MAPPER_END} safe for an attempt whose pushes failed: it
   * cannot win then, and the reply names the winner.
   */
  private boolean superseded() {
    JsonNode summary = shuffle.summary();
    boolean done = summary.path("committed").asBoolean()
        || summary.path("mappers_ended").asInt() >= summary.path("num_mappers").asInt();
    if (!done) {
      return false;
    }
    JsonNode reply = mapperEnd();
    if (reply.path("won").asBoolean()) {
      return false; // this very attempt had ended already: the conflict is real
    }
    pusher.abort();
    records.drop();
    state = State.SUPERSEDED;
    won = false;
    winner = reply.path("winner").asInt(-1);
    LOG.info("croupier: map " + mapId + " attempt " + attemptId + " of " + shuffle.appId() + "/" + shuffle.id()
        + ": attempt " + winner + " won and the shuffle is done; dropping this one");
    return true;
  }

  /** The winning attempt's id ({@code -1} before {@link #commit()}). */
  public int winner() {
    return winner;
  }

  /** PUSH messages sent (resends included). */
  public long messages() {
    return pusher.messages();
  }

  /** Drops what is buffered; no {@code MAPPER_END}, so this attempt never counts. Idempotent. */
  public void abort() {
    if (state == State.OPEN) {
      state = State.ABORTED;
      records.drop();
      pusher.abort();
    }
  }

  /** {@link #abort()} unless {@link #commit()} ran. Idempotent. */
  @Override
  public void close() {
    abort();
  }
}
