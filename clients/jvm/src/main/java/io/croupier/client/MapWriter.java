package io.croupier.client;

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
 */
public final class MapWriter implements AutoCloseable {
  MapWriter() {}

  /**
   * Pushes one opaque batch (already serialized and compressed by the caller) to {@code
   * partition}: a reader gets exactly these bytes back as one {@link Batch}. Blocks only while
   * the worker's in-flight window is full. Handles replication acks, CONGESTED back-off,
   * revives (same batch ids) and soft/hard splits.
   */
  public void pushBatch(int partition, byte[] data, int off, int len) {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * Adds one record to {@code partition}, framed as the Python SDK frames records (u32 LE
   * length + bytes); records are packed into batches of about {@code pushBufferSize} bytes.
   */
  public void write(int partition, byte[] record) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Data bytes pushed so far per partition (batch headers not counted). */
  public long[] bytesPerPartition() {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * Flushes, seals every touched partition, waits for every ack and sends {@code MAPPER_END}.
   * Returns whether this attempt won; a losing attempt ({@code won:false}, or {@code
   * STALE_LOCATION} because the shuffle committed) returns false and is not an error.
   */
  public boolean commit() {
    throw new UnsupportedOperationException("not yet");
  }

  /** Drops what is buffered; no {@code MAPPER_END}, so this attempt never counts. */
  public void abort() {}

  /** {@link #abort()} unless {@link #commit()} ran. Idempotent. */
  @Override
  public void close() {}
}
